"""nccl-tests for torch.distributed: all-reduce, all-gather, reduce-scatter and all-to-all over Gloo,
each checked exactly, timed, and printed in nccl-tests' columns by rank 0.

    python -m testbed job --hosts all -- {python} examples/torch_collectives.py -b 1M -e 8M -f 2
    python -m workloads.command --local 4 -- {python} examples/torch_collectives.py -b 64K -e 1M

A plain torch.distributed program: it reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and Gloo
reads GLOO_SOCKET_IFNAME) as torchrun would set them; the testbed's job launcher sets them. size is
nccl-tests' -b/-e: the whole buffer (all-gather's output, reduce-scatter's input, each rank's
all-to-all buffer). algbw = size / time; busbw = algbw · 2(n−1)/n for all-reduce, · (n−1)/n for the
others (nccl-tests' PERFORMANCE.md). time: the slowest rank's, the mean over -n timed iterations
after -w warm-up ones. With $STARNET_METRICS set, rank 0 appends each timed iteration's busbw there
({"<op>_<size>_busbw_mbps": …}), which the testbed summarises as the job's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", category=FutureWarning)  # torch 2.13 renames *_tensor to *_single
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
ITEMSIZE = 4  # float32


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"size: cannot read {text!r} (e.g. 64K, 8M)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def label(size: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def make(op: str, count: int, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input, output, expected) with small integers, so float32 sums are exact."""
    idx = torch.arange(count, dtype=torch.float32)
    if op == "all_reduce":
        x = (rank + 1) + idx.remainder(7)
        return x, x, n * (n + 1) / 2 + n * idx.remainder(7)
    if op == "all_gather":
        per = count // n
        return (torch.full((per,), float(rank + 1)), torch.empty(per * n),
                torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(per))
    if op == "reduce_scatter":
        per = count // n
        x = (rank + 1) + idx[: per * n].remainder(7)
        mine = idx[rank * per:(rank + 1) * per]
        return x, torch.empty(per), n * (n + 1) / 2 + n * mine.remainder(7)
    per = count // n  # all_to_all: chunk j goes to rank j
    x = (rank * 1000 + torch.arange(n, dtype=torch.float32)).repeat_interleave(per)
    return x, torch.empty(per * n), (torch.arange(n, dtype=torch.float32) * 1000 + rank).repeat_interleave(per)


def run(op: str, x: torch.Tensor, out: torch.Tensor) -> None:
    if op == "all_reduce":
        dist.all_reduce(out)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, x)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, x)
    else:
        dist.all_to_all_single(out, x)


def measure(op: str, size: int, iters: int, warmup: int, rank: int, n: int) -> tuple[float, int]:
    """Mean time of the slowest rank (s), and wrong elements on any rank."""
    count = size // ITEMSIZE
    times, wrong = [], 0
    for i in range(warmup + iters):
        x, out, expected = make(op, count, rank, n)
        if op == "all_reduce":
            out = x.clone()
        dist.barrier()
        t0 = time.monotonic()
        run(op, x, out)
        elapsed = torch.tensor([time.monotonic() - t0, float((out != expected).sum())])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        wrong = max(wrong, int(elapsed[1]))
        if i >= warmup:
            times.append(float(elapsed[0]))
    return sum(times) / len(times), wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--minbytes", default="1M")
    parser.add_argument("-e", "--maxbytes")
    parser.add_argument("-f", "--stepfactor", type=int, default=2)
    parser.add_argument("-n", "--iters", type=int, default=5)
    parser.add_argument("-w", "--warmup-iters", type=int, default=1)
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="Gloo's timeout for one operation")
    args = parser.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    if bad := [o for o in ops if o not in OPS]:
        raise SystemExit(f"--ops: unknown {', '.join(bad)} (of {', '.join(OPS)})")
    first, last = parse_size(args.minbytes), parse_size(args.maxbytes or args.minbytes)
    if args.stepfactor < 2 or first <= 0 or last < first:
        raise SystemExit("sizes: need 0 < -b <= -e and -f >= 2")
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, n = dist.get_rank(), dist.get_world_size()
    metrics = os.environ.get("STARNET_METRICS") if rank == 0 else None
    if rank == 0:
        print(f"# torch {torch.__version__}, Gloo, {n} ranks, interface {os.environ.get('GLOO_SOCKET_IFNAME', '?')}")
        print(f"#{'op':>15} {'size':>10} {'count':>10} {'type':>6} {'redop':>6} {'time':>11} {'algbw':>8} "
              f"{'busbw':>8} {'#wrong':>7} {'busbw':>8}")
        print(f"#{'':>15} {'(B)':>10} {'(elements)':>10} {'':>6} {'':>6} {'(us)':>11} {'(GB/s)':>8} "
              f"{'(GB/s)':>8} {'':>7} {'(Mb/s)':>8}")
    total_wrong, busbws = 0, []
    for op in ops:
        size = first
        while size <= last:
            size_ok = size - size % (ITEMSIZE * n)  # whole elements per rank
            time_s, wrong = measure(op, size_ok, args.iters, args.warmup_iters, rank, n)
            total_wrong += wrong
            algbw = size_ok / time_s / 1e9
            busbw = algbw * bus_factor(op, n)
            busbws.append(busbw)
            if rank == 0:
                print(f" {op:>15} {size_ok:>10} {size_ok // ITEMSIZE:>10} {'float':>6} "
                      f"{'sum' if 'reduce' in op else 'none':>6} {time_s * 1e6:>11.0f} {algbw:>8.4f} {busbw:>8.4f} "
                      f"{wrong:>7} {busbw * 8e3:>8.2f}", flush=True)
                if metrics:
                    with open(metrics, "a") as f:
                        f.write(json.dumps({f"{op}_{label(size)}_busbw_mbps": busbw * 8e3}) + "\n")
            size *= args.stepfactor
    if rank == 0:
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        print(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} GB/s")
    dist.barrier()  # every rank is done: nothing more goes over Gloo
    # End here, without destroy_process_group or the interpreter's exit: PyTorch 2.13's Gloo aborts in
    # about 1 of 10 teardowns ("terminate called without an active exception", SIGABRT) after every
    # rank has finished, which would turn a finished job into a failed one. The output is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if total_wrong else 0)


if __name__ == "__main__":
    sys.exit(main())
