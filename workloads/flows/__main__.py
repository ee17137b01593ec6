"""Incast and background flows on the running testbed (the newest `make run` under runs/), or on loopback.

    python -m workloads.flows incast --receiver h5 --senders h1,h2,h3,h4 --size 1M
    python -m workloads.flows background --hosts all --load 0.3 --seconds 10 --seed 1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from workloads.fabric import FabricView
from workloads.flows.job import run_flows
from workloads.flows.schedule import background, incast
from workloads.hosts import JobError, parse_size


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.flows", description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", type=Path, help="the testbed's run directory (default: the newest running)")
    parser.add_argument("--local", action="store_true", help="every host on loopback (no testbed)")
    parser.add_argument("--cc", help="TCP congestion control (cubic, bbr, reno, … as the kernel offers)")
    parser.add_argument("--name", help="job name (default: the kind)")
    kinds = parser.add_subparsers(dest="kind", required=True)
    inc = kinds.add_parser("incast", help="every sender sends SIZE bytes to the receiver at once")
    inc.add_argument("--receiver", required=True)
    inc.add_argument("--senders", required=True, help="comma-separated hosts")
    inc.add_argument("--size", default="1M", help="bytes per sender (default 1M)")
    bg = kinds.add_parser("background", help="Poisson flow arrivals between random host pairs")
    bg.add_argument("--hosts", default="all", help="comma-separated hosts, or 'all' (default)")
    bg.add_argument("--load", type=float, default=0.3, help="offered share of each host's link (default 0.3)")
    bg.add_argument("--seconds", type=float, default=10.0, help="arrivals during this long (default 10)")
    bg.add_argument("--seed", type=int, default=1)
    bg.add_argument("--min", default="16K", help="smallest flow (default 16K)")
    bg.add_argument("--max", default="2M", help="largest flow (default 2M; sizes are log-uniform)")
    bg.add_argument("--link-mbps", type=float, help="host link rate the load refers to (default: the topology's)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        view = None
        if not args.local:
            if os.geteuid() != 0:
                raise JobError("flow agents start inside Mininet hosts' namespaces: run as root (or use --local)")
            view = FabricView.of_run_dir(args.run_dir)
        if args.kind == "incast":
            flows = incast(args.receiver, args.senders.split(","), parse_size(args.size))
        else:
            if args.hosts == "all":
                if view is None:
                    raise JobError("--hosts all needs a testbed; with --local name the hosts (a,b,c)")
                hosts = [h.name for h in view.topo.hosts]
            else:
                hosts = args.hosts.split(",")
            link_mbps = args.link_mbps or (view.link_mbps(hosts) if view else None)
            if link_mbps is None:
                raise JobError("--link-mbps: give the link rate the load refers to (no testbed with --local)")
            flows = background(hosts, args.seconds, args.load, link_mbps, args.seed, parse_size(args.min),
                               parse_size(args.max))
        outcome = run_flows(flows, view, name=args.name or args.kind, kind=args.kind, local=args.local, cc=args.cc)
    except (JobError, ValueError) as exc:
        print(f"flows: {exc}", file=sys.stderr)
        return 2
    print(outcome.table)
    print(f"# results: {outcome.workdir}", file=sys.stderr)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
