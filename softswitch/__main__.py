"""Command line of the soft switch, shaped like simple_switch_grpc.

    python -m softswitch -i 1@s1-eth1 -i 2@s1-eth2 --device-id 1 \\
        --grpc-server-addr 127.0.0.1:PORT --cpu-port 255 [--log-file F] [--p4info FILE]

Extra options stand in for BMv2's Thrift start-up calls: ``--egress-rate PORT=MBPS`` and
``--egress-depth PORT=PKTS`` (set_queue_rate / set_queue_depth), and ``--stats-file`` for the
per-port queue and drop counters the testbed reads. ``--fidelity-file`` appends the switch's
lateness per 100 ms window (wire/fidelity.py) under ``--name``; ``--no-fidelity`` turns the
monitor off (to measure its cost).

The process is built to run at real-time priority when the testbed promotes it (wire/realtime.py):
its forwarding thread does no file I/O (the housekeeping thread does), and the objects of its
start-up are frozen out of the garbage collector, whose full collections otherwise held the
forwarding thread ~10 ms.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from softswitch.dataplane import DataPlane, PortSpec
from softswitch.device import Device
from softswitch.errors import DETAILS_BUDGET_BYTES
from softswitch.p4rt_server import DEFAULT_MAX_STREAMS, P4RuntimeService, serve
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from wire.cpu import CPU_PORT
from wire.fidelity import DEFAULT_TOLERANCE_MS, FidelityWindows
from wire.p4info import DEFAULT_P4INFO, P4Schema


def _port_map(values: list[str], option: str, cast: Callable[[str], float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for value in values:
        port, sep, amount = value.partition("=")
        try:
            out[int(port)] = cast(amount)
            if not sep:
                raise ValueError
        except ValueError:
            raise SystemExit(f"{option}: expected PORT=VALUE, got {value!r}") from None
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="softswitch", description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--interface", action="append", default=[], metavar="PORT@IFACE",
                        help="attach a Linux interface as a P4 port (repeatable)")
    parser.add_argument("--device-id", type=int, default=0)
    parser.add_argument("--grpc-server-addr", default="127.0.0.1:9559",
                        help="127.0.0.1:PORT or unix:PATH (never 0.0.0.0)")
    parser.add_argument("--cpu-port", type=int, default=CPU_PORT)
    parser.add_argument("--log-file", type=Path)
    parser.add_argument("--log-level", default="info",
                        choices=["trace", "debug", "info", "warn", "error", "critical", "off"])
    parser.add_argument("--p4info", type=Path, help="start with this pipeline already set")
    parser.add_argument("--egress-rate", action="append", default=[], metavar="PORT=MBPS")
    parser.add_argument("--egress-depth", action="append", default=[], metavar="PORT=PKTS")
    parser.add_argument("--default-depth", type=int, default=64, help="egress queue depth in packets")
    parser.add_argument("--stats-file", type=Path)
    parser.add_argument("--faults-file", type=Path,
                        help="follow injected faults written here: processing delay, port rates (JSON)")
    parser.add_argument("--seed", type=int, help="seed of the RNG (drop-with-probability, INT sampling)")
    parser.add_argument("--name", help="switch name in fidelity records (default dev<device id>)")
    parser.add_argument("--fidelity-file", type=Path, help="append lateness per 100 ms window to this CSV")
    parser.add_argument("--fidelity-tolerance-ms", type=float, default=DEFAULT_TOLERANCE_MS,
                        help="a departure or receive later than this is a late event (default %(default)s)")
    parser.add_argument("--no-fidelity", action="store_true", help="do not measure lateness")
    parser.add_argument("--max-streams", type=int, default=DEFAULT_MAX_STREAMS,
                        help="P4Runtime StreamChannels served at once; more get RESOURCE_EXHAUSTED")
    parser.add_argument("--error-details-bytes", type=int, default=DETAILS_BUDGET_BYTES,
                        help="a failed Write's or Read's per-update details are cut to this size, so a client "
                             "with gRPC's default 8 KiB trailer limit reads them (0: every one, for clients "
                             "that raise grpc.max_metadata_size; default %(default)s)")
    return parser.parse_args(argv)


def build_ports(args: argparse.Namespace) -> list[PortSpec]:
    rates = _port_map(args.egress_rate, "--egress-rate", float)
    depths = _port_map(args.egress_depth, "--egress-depth", int)
    ports = []
    for value in args.interface:
        port, sep, iface = value.partition("@")
        if not sep or not port.isdigit() or not iface:
            raise SystemExit(f"-i: expected PORT@IFACE, got {value!r}")
        ports.append(PortSpec(int(port), iface, rates.get(int(port), 0.0),
                              int(depths.get(int(port), args.default_depth))))
    return ports


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    level = {"trace": "DEBUG", "warn": "WARNING", "off": "CRITICAL"}.get(args.log_level, args.log_level.upper())
    logging.basicConfig(filename=args.log_file, level=level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log = logging.getLogger("softswitch")
    ports = build_ports(args)
    schema = P4Schema.load(args.p4info or DEFAULT_P4INFO)
    pipeline = Pipeline(RuntimeState(schema))
    if args.seed is not None:
        pipeline.rng.seed(args.seed)
    try:
        fidelity = None
        if not args.no_fidelity:
            fidelity = FidelityWindows(args.fidelity_file, args.name or f"dev{args.device_id}", "switch",
                                       args.fidelity_tolerance_ms, deferred=True)
        dataplane = DataPlane(pipeline, ports, args.cpu_port, args.stats_file, fidelity, args.faults_file)
    except (OSError, ValueError) as exc:
        log.error("cannot start the data plane: %s", exc)
        print(f"softswitch: cannot start the data plane: {exc}", file=sys.stderr)
        return 2

    def on_pipeline(new_schema: P4Schema, state: RuntimeState) -> None:
        pipeline.bind(state)
        gc.collect()
        gc.freeze()  # the new pipeline's objects live as long as it does: out of every later full collection

    device = Device(args.device_id, args.cpu_port, on_pipeline, dataplane.inject,
                    on_probes=lambda schedule: dataplane.set_probes(args.device_id, schedule),
                    ports=frozenset(p.port for p in ports))
    if args.p4info:
        device.schema, device.state = schema, pipeline.state
        device.config.p4info.CopyFrom(schema.p4info)
    service = P4RuntimeService(device, args.max_streams, args.error_details_bytes)
    pipeline.packet_in = service.send_packet_in
    try:
        server, _ = serve(service, args.grpc_server_addr)
    except (OSError, ValueError, RuntimeError) as exc:
        log.error("P4Runtime server: %s", exc)
        print(f"softswitch: P4Runtime server: {exc}", file=sys.stderr)
        return 2
    log.info("device %d: %d ports, P4Runtime on %s", args.device_id, len(ports), args.grpc_server_addr)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        dataplane.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    failure = run_until_stopped(dataplane)
    server.stop(grace=0.5).wait()
    dataplane.close()
    if failure is not None:
        print(f"softswitch: data plane failed: {failure!r}", file=sys.stderr)
        return 1
    log.info("stopped")
    return 0


def run_until_stopped(dataplane: DataPlane) -> BaseException | None:
    """Forwarding and housekeeping threads until the data plane is stopped (a signal) or fails;
    the failure, if one ended it (logged with its traceback)."""
    log = logging.getLogger("softswitch")
    gc.collect()
    gc.freeze()
    failure: list[BaseException] = []

    def forward() -> None:
        try:
            dataplane.run()
        except BaseException as exc:  # the switch must say why it died, and not exit 0
            log.critical("data plane failed", exc_info=True)
            failure.append(exc)

    forwarder = threading.Thread(target=forward, name="dataplane")
    housekeeper = threading.Thread(target=dataplane.housekeep, name="housekeeping")
    forwarder.start()
    housekeeper.start()
    while forwarder.is_alive():
        forwarder.join(0.5)
    dataplane.stop()
    housekeeper.join()
    dataplane.finish()
    return failure[0] if failure else None


if __name__ == "__main__":
    sys.exit(main())
