"""The controller's options, one frozen object (command line: `python -m controller --help`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from controller.advice import FLOWLET_GAP_US, MODES
from controller.program import INT_SAMPLE_LOG2
from wire.intmd import DSCP_INT


@dataclass(frozen=True)
class ControllerOptions:
    int_sample_log2: int | None = INT_SAMPLE_LOG2  # INT starts on 1 in 2^N packets of each host flow (None: no INT)
    int_dscp: int = DSCP_INT  # the DSCP that marks INT: what sources mark and the parsers take as INT
    mode: str = "none"  # none | ecn | advice | bbr at start
    interval_s: float = 0.001  # advice loop period
    flowlet_gap_us: int = FLOWLET_GAP_US  # mode flowlet: packets further apart start a new flowlet
    eta: float = 0.95  # target utilisation of every link
    drain_s: float = 0.1  # horizon to drain a standing queue
    fidelity_file: Path | None = None  # event-loop lag and BMv2 switches' lateness (from INT); None: not measured
    probe_s: float = 0.050  # link probes out of every fabric port (controller/links.py); 0: none
    probe_misses: int = 4  # probe periods without one: the link is down
    hold_down_s: float = 0.5  # a failed link returns to service after probes crossed it this long
    metrics_port: int | None = 0  # Prometheus /metrics on 127.0.0.1 (0: a free port; None: not served)
    web_port: int | None = 0  # the live page on 127.0.0.1 (0: a free port; None: not served)
    api_socket: Path | None = None  # the advice API's Unix socket (None: <run dir>/controller.sock)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--int-sample-log2", type=int, default=INT_SAMPLE_LOG2, choices=range(-1, 17),
                            metavar="N", help="INT on 1 in 2^N packets of each host flow (0..16; -1 = INT off)")
        parser.add_argument("--int-dscp", type=int, default=DSCP_INT, choices=range(64), metavar="DSCP",
                            help="the DSCP that marks INT (default %(default)s, CS4); traffic of the hosts "
                                 "should not use it (README: INT and DSCP)")
        parser.add_argument("--mode", default="none", choices=MODES, help="control mode at start")
        parser.add_argument("--interval-ms", type=float, default=1.0, help="advice loop period (ms)")
        parser.add_argument("--flowlet-gap-ms", type=float, default=FLOWLET_GAP_US / 1000,
                            help="mode flowlet: a flow's packets further apart than this start a new flowlet "
                                 "(default %(default)s)")
        parser.add_argument("--eta", type=float, default=0.95, help="target utilisation of every link")
        parser.add_argument("--drain-ms", type=float, default=100.0, help="horizon to drain a standing queue (ms)")
        parser.add_argument("--probe-ms", type=float, default=50.0,
                            help="link probe period on every fabric port (ms; 0 = no probes, no failure detection)")
        parser.add_argument("--probe-misses", type=int, default=4, help="probe periods without one: the link is down")
        parser.add_argument("--hold-down-ms", type=float, default=500.0,
                            help="a failed link returns to service after probes crossed it this long without a miss")
        parser.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                            help="serve Prometheus /metrics on 127.0.0.1:PORT (default 0: a free port, written to "
                                 "the run directory's metrics.addr; -1: not served)")
        parser.add_argument("--web-port", "--web", type=int, default=0, metavar="PORT",
                            help="serve the live page on 127.0.0.1:PORT (default 0: a free port, written to the "
                                 "run directory's live.addr; -1: not served)")
        parser.add_argument("--fidelity-file", type=Path,
                            help="append event-loop lag and BMv2 switches' lateness (from INT) per 100 ms window here")
        parser.add_argument("--api-socket", type=Path, metavar="PATH",
                            help="serve the advice API on this Unix socket (default: the run directory's "
                                 "controller.sock; cluster mode: a path every server forwards to it)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ControllerOptions:
        """The options the parsed command line gives; ValueError naming the wrong one."""
        if args.probe_ms < 0 or args.probe_misses < 1 or args.hold_down_ms < 0:
            raise ValueError("--probe-ms and --hold-down-ms must be >= 0, --probe-misses >= 1")
        for name, port in (("--metrics-port", args.metrics_port), ("--web-port", args.web_port)):
            if not -1 <= port <= 65535:
                raise ValueError(f"{name} must be a TCP port, 0 (a free one) or -1 (none)")
        if not 0 < args.flowlet_gap_ms <= 4e6:
            raise ValueError("--flowlet-gap-ms must be above 0 (and fit 32 bits of µs)")
        return cls(int_sample_log2=None if args.int_sample_log2 < 0 else args.int_sample_log2,
                   int_dscp=args.int_dscp, mode=args.mode,
                   interval_s=args.interval_ms / 1000, flowlet_gap_us=int(args.flowlet_gap_ms * 1000),
                   eta=args.eta, drain_s=args.drain_ms / 1000,
                   fidelity_file=args.fidelity_file, probe_s=args.probe_ms / 1000, probe_misses=args.probe_misses,
                   hold_down_s=args.hold_down_ms / 1000,
                   metrics_port=None if args.metrics_port < 0 else args.metrics_port,
                   web_port=None if args.web_port < 0 else args.web_port, api_socket=args.api_socket)
