"""An Open MPI all-reduce sweep with mpi4py: osu_allreduce-style times and nccl-tests' busbw per size.

    python -m testbed job --hosts all --mpi -- {python} examples/mpi_allreduce.py -b 4K -e 16M -f 4
    python -m testbed job --hosts all --mpi --mpi-args "--mca coll_tuned_use_dynamic_rules 1 \\
        --mca coll_tuned_allreduce_algorithm 3" -- {python} examples/mpi_allreduce.py      # 3: recursive doubling

A plain MPI program (run by mpirun; rank and size from MPI). Every size is checked exactly (small
integers in float32) and timed over -n iterations after -w warm-up ones, each between barriers; time
is the slowest rank's mean. busbw = size / time · 2(n−1)/n. Open MPI 4.1's coll_tuned allreduce
algorithms: 1 basic linear, 2 nonoverlapping, 3 recursive doubling, 4 ring, 5 segmented ring,
6 Rabenseifner; 0 (default) lets its decision table pick by size. Rank 0 prints the table and, with
$STARNET_METRICS set, appends {"allreduce_<size>_time_s": …} per size there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np
from mpi4py import MPI


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"size: cannot read {text!r} (e.g. 4K, 16M)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def label(size: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--minbytes", default="4K")
    parser.add_argument("-e", "--maxbytes", default="16M")
    parser.add_argument("-f", "--stepfactor", type=int, default=4)
    parser.add_argument("-n", "--iters", type=int, default=5)
    parser.add_argument("-w", "--warmup-iters", type=int, default=1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    first, last = parse_size(args.minbytes), parse_size(args.maxbytes)
    if args.stepfactor < 2 or first < 4 or last < first:
        raise SystemExit("sizes: need 4 <= -b <= -e and -f >= 2")
    algorithm = os.environ.get("OMPI_MCA_coll_tuned_allreduce_algorithm", "0 (Open MPI's decision table)")
    metrics = os.environ.get("STARNET_METRICS") if rank == 0 else None
    if rank == 0:
        print(f"# Open MPI all-reduce, {n} ranks, {MPI.Get_library_version().splitlines()[0]}; algorithm {algorithm}")
        print(f"#{'size':>11} {'count':>10} {'time':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7} {'busbw':>8}")
        print(f"#{'(B)':>11} {'(elements)':>10} {'(us)':>11} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7} {'(Mb/s)':>8}")
    total_wrong, size = 0, first
    while size <= last:
        count = size // 4
        idx = np.arange(count, dtype=np.float32) % 7
        send = (rank + 1) + idx
        expected = n * (n + 1) / 2 + n * idx
        recv = np.empty_like(send)
        times = []
        for i in range(args.warmup_iters + args.iters):
            comm.Barrier()
            t0 = time.monotonic()
            comm.Allreduce(send, recv, op=MPI.SUM)
            elapsed = comm.allreduce(time.monotonic() - t0, op=MPI.MAX)
            if i >= args.warmup_iters:
                times.append(elapsed)
        wrong = comm.allreduce(int(np.count_nonzero(recv != expected)), op=MPI.MAX)
        total_wrong += wrong
        mean = sum(times) / len(times)
        algbw = size / mean / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if rank == 0:
            print(f" {size:>11} {count:>10} {mean * 1e6:>11.0f} {algbw:>8.4f} {busbw:>8.4f} {wrong:>7} "
                  f"{busbw * 8e3:>8.2f}", flush=True)
            if metrics:
                with open(metrics, "a") as f:
                    f.write(json.dumps({f"allreduce_{label(size)}_time_s": mean}) + "\n")
        size *= args.stepfactor
    if rank == 0:
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
