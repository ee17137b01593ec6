"""python -m workloads.command — run your own program on the testbed's hosts, one rank per host.

    python -m workloads.command --hosts h1,h2,h3,h4 -- python3 train.py --epochs 1
    python -m workloads.command --hosts all --timeout-s 300 --env NCCL_DEBUG=INFO -- ./allreduce_bench
    python -m workloads.command --local 2 -- python3 -c 'import os; print(os.environ["RANK"])'
    python -m workloads.command --hosts all --mpi --mpi-args "--mca coll_tuned_use_dynamic_rules 1" \
        -- {python} examples/mpi_allreduce.py

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT (rank 0's address),
GLOO_SOCKET_IFNAME (its hN-eth0) and STARNET_* variables; output per rank in
runs/<run>/jobs/<name>/rank<N>-<host>.log. Exit status 0 when every rank exited 0, 1 when one
failed or the timeout ended the job (its ranks' exit codes and output tails on stderr), 2 on bad
arguments. `python -m testbed job …` is the same command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from workloads.command.job import DEFAULT_MASTER_PORT, CommandSpec, run_command
from workloads.fabric import FabricView
from workloads.hosts import JobError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--hosts", help="comma-separated Mininet hosts (rank 0 first), or 'all'")
    where.add_argument("--local", type=int, metavar="N", help="N ranks on loopback (no testbed)")
    parser.add_argument("--run-dir", type=Path, help="the testbed's run directory (default: the newest running)")
    parser.add_argument("--name", default="job", help="the job's name (its directory under runs/<run>/jobs/)")
    parser.add_argument("--order", default="given", choices=("given", "topology"),
                        help="rank order: as listed (default) or grouped by leaf")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="end the job after this long (default 600)")
    parser.add_argument("--grace-s", type=float, default=5.0, help="SIGTERM to SIGKILL when ranks are ended")
    parser.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT, help="rank 0's rendezvous port")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for every rank (repeatable)")
    parser.add_argument("--mpi", action="store_true", help="one mpirun (Open MPI) in the first host, a slot per host")
    parser.add_argument("--mpi-args", default="", help="mpirun's own options, one string (with --mpi)")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- the program and its arguments")


def spec_of(args: argparse.Namespace, view: FabricView | None) -> CommandSpec:
    argv = list(args.program)
    if argv and argv[0] == "--":
        argv = argv[1:]
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise JobError(f"--env: {item!r} is not NAME=VALUE")
        env[name] = value
    hosts: list[str] = []
    if args.hosts:
        assert view is not None
        hosts = [h.name for h in view.topo.hosts] if args.hosts == "all" else [h for h in args.hosts.split(",") if h]
    return CommandSpec(argv=argv, hosts=hosts, local=args.local or 0, name=args.name, order=args.order,
                       timeout_s=args.timeout_s, grace_s=args.grace_s, master_port=args.master_port, env=env,
                       launcher="mpi" if args.mpi else "direct", mpi_args=shlex.split(args.mpi_args))


def main(argv: list[str] | None = None, prog: str = "python -m workloads.command") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        view = None
        if args.hosts:
            if os.geteuid() != 0:
                raise JobError("ranks start inside Mininet hosts' namespaces: run as root")
            view = FabricView.of_run_dir(args.run_dir)
        outcome = run_command(spec_of(args, view), view)
    except (JobError, ValueError) as exc:
        print(f"job: {exc}", file=sys.stderr)
        return 2
    print(outcome.table)
    if not outcome.ok:
        print(outcome.failure_tails(), file=sys.stderr)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
