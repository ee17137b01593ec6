"""python -m workloads.allreduce — nccl-tests' all_reduce_perf (and all_gather_perf, reduce_scatter_perf,
alltoall_perf with --collective) for the testbed.

    python -m workloads.allreduce --hosts h1,h2,h3,h4 -b 1M -e 64M -f 2 --algo ring
    python -m workloads.allreduce --hosts all --size 8M --algo auto
    python -m workloads.allreduce --hosts all --collective alltoall --algo pxn --size 8M    # TOPO=railopt
    python -m workloads.allreduce --local 4 -b 4K -e 16M -f 4        # ranks on loopback, no testbed

With --hosts it runs on the newest running testbed under runs/ (or --run-dir); the table goes to
stdout, progress to stderr, and results.json / results.txt to runs/<run>/jobs/<name>/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from workloads.allreduce.job import JobSpec, run_job
from workloads.allreduce.launcher import size_range
from workloads.allreduce.schedule import COLLECTIVES, algorithms
from workloads.allreduce.tuner import DEFAULT_CACHE
from workloads.fabric import FabricView
from workloads.hosts import JobError, parse_size


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.allreduce", description=__doc__.split("\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--hosts", help="comma-separated Mininet hosts, or 'all'")
    where.add_argument("--local", type=int, metavar="N", help="N ranks on loopback (no testbed)")
    parser.add_argument("--run-dir", type=Path, help="the testbed's run directory (default: the newest running)")
    parser.add_argument("-b", "--minbytes", default="8M", help="smallest size (default 8M)")
    parser.add_argument("-e", "--maxbytes", help="largest size (default: minbytes)")
    parser.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier (default 2)")
    parser.add_argument("--size", help="one size (same as -b SIZE -e SIZE)")
    parser.add_argument("--collective", default="allreduce", choices=tuple(COLLECTIVES))
    parser.add_argument("--algo", help="the collective's algorithm (default: ring; alltoall: pairwise); "
                        + "; ".join(f"{c}: {'|'.join(algorithms(c))}" for c in COLLECTIVES) + "; or auto, for any")
    parser.add_argument("--split", type=float, default=0.0,
                        help="of what GPUs of one server exchange, the share sent through their NICs (0..1)")
    parser.add_argument("--adapt-rails", action="store_true",
                        help="hier: size the rails' shares by their rates, measured in one probe iteration")
    parser.add_argument("--chunk", default="256K", help="chunk size of the pipelined transfers (default 256K)")
    parser.add_argument("-n", "--iters", type=int, default=5)
    parser.add_argument("-w", "--warmup-iters", type=int, default=1)
    parser.add_argument("--cc", help="TCP congestion control (cubic, bbr, reno, … as the kernel offers)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order", default="topology", choices=("topology", "given"),
                        help="rank order: grouped by leaf (default) or as listed")
    parser.add_argument("--no-declare", action="store_true", help="do not declare demands to the controller")
    parser.add_argument("--name", help="the job's name (default: the collective's)")
    parser.add_argument("--tuner-cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        first = parse_size(args.size or args.minbytes)
        last = parse_size(args.size or args.maxbytes or args.minbytes)
        sizes = size_range(first, last, args.stepfactor)
        view = None
        hosts: list[str] = []
        if args.hosts:
            if os.geteuid() != 0:
                raise JobError("ranks start inside Mininet hosts' namespaces: run as root")
            view = FabricView.of_run_dir(args.run_dir)
            hosts = [h.name for h in view.topo.hosts] if args.hosts == "all" else args.hosts.split(",")
        algo = args.algo or algorithms(args.collective)[0]
        spec = JobSpec(hosts=hosts, local=args.local or 0, sizes=sizes, algo=algo, collective=args.collective,
                       split=args.split, adapt_rails=args.adapt_rails,
                       chunk_bytes=parse_size(args.chunk), iters=args.iters, warmup=args.warmup_iters, cc=args.cc,
                       seed=args.seed, order=args.order, declare=not args.no_declare, name=args.name or args.collective,
                       tuner_cache=args.tuner_cache)
        outcome = run_job(spec, view)
    except (JobError, ValueError) as exc:
        print(f"allreduce: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(json.loads((outcome.workdir / "results.json").read_text()), indent=1))
    else:
        print(outcome.table)
        print(f"# results: {outcome.workdir}", file=sys.stderr)
    return 1 if outcome.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
