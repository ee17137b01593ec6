"""python -m testbed run|job|scenario|report|replay|clean|address|device-id

    run --topo NAME|FILE --dataplane auto|soft|bmv2   bring up a testbed and open the CLI [--servers ns]
    job --hosts h1,h2,… -- PROGRAM [ARGS]            run your program on the hosts, one rank each
    scenario FILE [--modes a,b] [--short F]          run a scenario file per mode, write its report
    report [REPORT.md]                               print the first table of the last (or given) report
    replay RUN_DIR [--speed X] [--from S]            play a finished run back on the live page
    clean                                            end what earlier runs left (by recorded PID)
    address SW / device-id SW                        P4Runtime address / device id of a running switch
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from controller.advice import MODES
from emulation.rundir import RUNS, clean_all
from wire import runfiles
from wire.intmd import DSCP_INT
from wire.realtime import DEFAULT_PRIORITY
from workloads.command.__main__ import add_arguments as add_job_arguments


def _latest_switches() -> dict:
    for run_dir in sorted(RUNS.glob("*"), reverse=True):
        info = run_dir / runfiles.SWITCHES
        if info.exists() and not (run_dir / runfiles.STOPPED).exists():
            return json.loads(info.read_text())["switches"]
    raise SystemExit("no running testbed found under runs/ (start one with `make run`)")


def cmd_run(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("testbed: Mininet needs root (run as root or with sudo)", file=sys.stderr)
        return 2
    from mininet.log import setLogLevel

    from emulation.cluster import ClusterError, default_ssh_key
    from emulation.net import Testbed, TestbedError
    from emulation.nodes import SwitchStartError
    from testbed.cli import StarNetCLI
    from topologies import TopologyError, topology_by_name

    setLogLevel("info")
    try:
        topo = topology_by_name(args.topo)
        if args.link_mbps is not None:
            topo = topo.scaled(args.link_mbps)
        bmv2_options = {"log_level": args.bmv2_log}
        tb = Testbed(topo, dataplane=args.dataplane, bmv2_options=bmv2_options, int_sample_log2=args.int_sample_log2,
                     mode=args.mode, realtime_priority=args.switch_priority,
                     controller_args=["--int-dscp", str(args.int_dscp)], servers=args.servers,
                     ssh_key=args.ssh_key or default_ssh_key())
        if args.pcap:
            (tb.run_dir / "pcaps").mkdir(exist_ok=True)
            bmv2_options["pcap_dir"] = tb.run_dir / "pcaps"
    except (TopologyError, TestbedError) as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    try:
        tb.start()
    except (SwitchStartError, TestbedError, ClusterError) as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1
    try:
        StarNetCLI(tb)
    finally:
        tb.stop()
    print(f"testbed stopped; run directory {tb.run_dir}")
    return 0


def cmd_scenario(args: argparse.Namespace) -> int:
    from lab.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.file)
        if args.modes:
            scenario.modes = [m for m in args.modes.split(",") if m]
            bad = [m for m in scenario.modes if m not in MODES]
            if bad:
                raise ScenarioError(f"--modes: {', '.join(bad)} not one of {', '.join(MODES)}")
        if args.short is not None:
            if not 0 < args.short <= 1:
                raise ScenarioError(f"--short: must be in (0, 1], got {args.short}")
            scenario = scenario.shortened(args.short)
    except ScenarioError as exc:
        print(f"testbed scenario: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("testbed: Mininet needs root (run as root or with sudo)", file=sys.stderr)
        return 2
    from mininet.log import setLogLevel

    from lab.experiment import run_scenario
    from lab.report import report_table

    setLogLevel("warning")
    result = run_scenario(scenario)
    print("\n" + report_table(result.out_dir / "report.md"))
    failed = [f"{m}/{r.name}" for m, run in result.runs.items() for r in run.jobs if not r.ok]
    if failed:
        print(f"testbed scenario: jobs failed or unfinished: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from lab.report import last_report, report_table

    path = Path(args.file) if args.file else last_report()
    if path is None or not path.exists():
        print("testbed report: no report under runs/ yet (`make demo` writes one)", file=sys.stderr)
        return 2
    print(f"{path}\n\n{report_table(path)}")
    return 0


def cmd_diagnose_eval(args: argparse.Namespace) -> int:
    from lab.diagnose_eval import KINDS, SERVER_KINDS, evaluate
    from topologies import TopologyError, topology_by_name

    try:
        topo = topology_by_name(args.topo)
    except TopologyError as exc:
        print(f"testbed diagnose-eval: --topo: {exc}", file=sys.stderr)
        return 2
    offered = KINDS + (SERVER_KINDS if topo.servers else ())
    kinds = (tuple(k for k in args.kinds.split(",") if k) if args.kinds is not None
             else tuple(k for k in (SERVER_KINDS if topo.servers else KINDS)
                        if args.dataplane == "soft" or k not in ("delay", "rail")))
    unknown = [k for k in kinds if k not in offered]
    if unknown or not kinds or args.trials < 0 or args.no_fault < 0:
        print(f"testbed diagnose-eval: --kinds from {', '.join(offered)} on {topo.name}; --trials, --no-fault >= 0",
              file=sys.stderr)
        return 2
    if args.dataplane == "bmv2" and ({"delay", "rail"} & set(kinds)):
        print("testbed diagnose-eval: --kinds delay and rail need the soft data plane (BMv2 has no processing-delay "
              "knob)", file=sys.stderr)
        return 2
    evaluate(args.trials, args.no_fault, args.seed, kinds, timeout_s=args.timeout, dataplane=args.dataplane,
             topo=topo)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from controller.replay import Replay, RunNotReplayable

    try:
        replay = Replay(Path(args.run_dir), speed=args.speed, start_s=args.start)
        server = replay.serve(args.port)
    except (RunNotReplayable, OSError) as exc:
        print(f"testbed replay: {exc}", file=sys.stderr)
        return 2
    print(f"replaying {args.run_dir} ({replay.t1 - replay.t0:.1f} s of it, from {args.start:g} s, x{args.speed:g}) "
          f"on http://127.0.0.1:{server.server_port}/ — the clock starts when a page opens; Ctrl-C ends it", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="bring up a testbed and open the CLI")
    run.add_argument("--topo", default="leafspine")
    run.add_argument("--dataplane", default="auto")
    run.add_argument("--servers", metavar="ns|NAME=[USER@]ADDRESS,...",
                     help="cluster mode: the fabric split over this machine and servers; 'ns', a second server "
                          "made on this one (a network namespace with its own sshd), or machines of the "
                          "experiment network, e.g. srv2=192.168.56.12 (README: Cluster mode)")
    run.add_argument("--ssh-key", type=Path, metavar="FILE",
                     help="cluster mode on machines: the private key their root authorizes (default: "
                          "$STARNET_SSH_KEY, or /etc/starnet/cluster_key where vm/provision.sh puts it)")
    run.add_argument("--link-mbps", type=float, metavar="MBPS",
                     help="every link at this rate instead of the topology's (e.g. 10 on a standard BMv2 build)")
    run.add_argument("--bmv2-log", metavar="LEVEL", help="BMv2 logging (trace|debug|info|...); off by default")
    run.add_argument("--pcap", action="store_true", help="BMv2: write per-port pcaps into the run directory")
    run.add_argument("--mode", default="none", choices=MODES,
                     help="congestion control: plain TCP (cubic), switch ECN + TCP ECN, controller rate advice, "
                          "or BBR senders")
    run.add_argument("--switch-priority", type=int, default=DEFAULT_PRIORITY, choices=range(0, 100), metavar="PRIO",
                     help="SCHED_FIFO priority of the switch processes (default %(default)s; 0: normal scheduling)")
    run.add_argument("--int-sample-log2", type=int, default=3, choices=range(-1, 17), metavar="N",
                     help="INT on 1 in 2^N packets of each host flow (default 3; -1 = INT off)")
    run.add_argument("--int-dscp", type=int, default=DSCP_INT, choices=range(64), metavar="DSCP",
                     help="the DSCP that marks INT in the fabric (default %(default)s, CS4; README: INT and DSCP)")
    job = sub.add_parser("job", help="run your own program on the running testbed's hosts, one rank per host "
                         "(python -m workloads.command)")
    add_job_arguments(job)
    scenario = sub.add_parser("scenario", help="run a scenario file (each mode on a fresh testbed) and report")
    scenario.add_argument("file")
    scenario.add_argument("--modes", help="comma-separated modes instead of the file's")
    scenario.add_argument("--short", type=float, metavar="F", help="scale sizes, durations and times by F (0..1]")
    report = sub.add_parser("report", help="print the first table of the last scenario report")
    report.add_argument("file", nargs="?")
    replay = sub.add_parser("replay", help="play a finished run directory back on the live page")
    replay.add_argument("run_dir")
    replay.add_argument("--speed", type=float, default=1.0, help="times the run's own pace (default 1)")
    replay.add_argument("--from", dest="start", type=float, default=0.0, metavar="S",
                        help="start S seconds into the run")
    replay.add_argument("--port", type=int, default=0, help="serve on 127.0.0.1:PORT (default: a free port)")
    sub.add_parser("clean", help="end processes and delete interfaces left by earlier runs")
    ev = sub.add_parser("diagnose-eval", help="evaluate fault localisation: randomised fault trials under load")
    ev.add_argument("--trials", type=int, default=60, help="fault trials, spread over the kinds")
    ev.add_argument("--no-fault", type=int, default=10, help="trials without a fault")
    ev.add_argument("--seed", type=int, default=1)
    ev.add_argument("--kinds", help="fault kinds, comma-separated (default: all the data plane can inject)")
    ev.add_argument("--dataplane", choices=("soft", "bmv2"), default="soft")
    ev.add_argument("--timeout", type=float, default=10.0, help="seconds a trial waits for a correct top-1")
    ev.add_argument("--topo", default="leafspine", help="a topology name or file (railopt:servers=2,gpus=4: the "
                    "kinds of multi-GPU servers)")
    for name in ("address", "device-id"):
        sub.add_parser(name).add_argument("switch")
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "job":
        from workloads.command.__main__ import main as job_main

        return job_main(argv[1:] if argv is not None else sys.argv[2:], prog="testbed job")
    if args.command == "scenario":
        return cmd_scenario(args)
    if args.command == "report":
        return cmd_report(args)
    if args.command == "diagnose-eval":
        return cmd_diagnose_eval(args)
    if args.command == "replay":
        return cmd_replay(args)
    if args.command == "clean":
        done = clean_all()
        print("\n".join(done) if done else "nothing left by earlier runs")
        return 0
    switches = _latest_switches()
    if args.switch not in switches:
        raise SystemExit(f"no switch {args.switch!r} in the running testbed ({', '.join(switches)})")
    print(switches[args.switch]["grpc" if args.command == "address" else "device_id"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
