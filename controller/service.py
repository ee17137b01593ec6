"""The controller's gRPC API (controller/proto/advice.proto) on a Unix socket in the run directory."""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from controller.proto import advice_pb2 as pb
from controller.proto import advice_pb2_grpc as pb_grpc
from controller.telemetry import Collector

SOCKET_NAME = "controller.sock"


def state_message(collector: Collector, request: pb.GetStateRequest, now: float | None = None) -> pb.State:
    now = time.monotonic() if now is None else now
    state = pb.State(reports=collector.reports, bad_reports=collector.bad_reports)
    for (switch, port), s in sorted(collector.ports.items()):
        if (request.switch and switch != request.switch) or (request.port and port != request.port):
            continue
        message = state.ports.add(switch=switch, port=port, queue_pkts=s.queue_pkts, hop_latency_us=s.hop_latency_us,
                                  capacity_mbps=s.capacity_mbps, age_s=now - s.updated)
        if s.tx_rate_mbps is not None:
            message.has_rate = True
            message.tx_rate_mbps = s.tx_rate_mbps
            message.utilisation = s.utilisation or 0.0
    if request.include_flows:
        for (src, dst, proto, sport, dport), flow in sorted(collector.flows.items()):
            if request.switch and all(h[0] != request.switch for h in flow.hops):
                continue
            message = state.flows.add(src=src, dst=dst, protocol=proto, src_port=sport, dst_port=dport,
                                      age_s=now - flow.updated)
            for switch, in_port, out_port in flow.hops:
                message.hops.add(switch=switch, ingress_port=in_port, egress_port=out_port)
    return state


class AdviceService(pb_grpc.AdviceServicer):
    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    async def GetState(self, request: pb.GetStateRequest, context) -> pb.State:  # noqa: N802 (gRPC name)
        return state_message(self.collector, request)


UNIX_PATH_MAX = 107  # sun_path holds 108 bytes including the terminating NUL


async def start_server(run_dir: Path, collector: Collector) -> grpc.aio.Server:
    """Serve the API on unix:<run_dir>/controller.sock, or on 127.0.0.1 when that path is too long
    for a Unix socket; the address used is written to <run_dir>/controller.addr."""
    path = run_dir / SOCKET_NAME
    server = grpc.aio.server()
    pb_grpc.add_AdviceServicer_to_server(AdviceService(collector), server)
    if len(str(path)) <= UNIX_PATH_MAX:
        path.unlink(missing_ok=True)
        address = f"unix:{path}"
        server.add_insecure_port(address)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
        address = f"127.0.0.1:{port}"
    await server.start()
    (run_dir / "controller.addr").write_text(address + "\n")
    return server


def get_state(run_dir: Path, switch: str = "", port: int = 0, include_flows: bool = False,
              timeout_s: float = 3.0) -> pb.State:
    """Synchronous GetState for the CLI and tests."""
    address = (run_dir / "controller.addr").read_text().strip()
    with grpc.insecure_channel(address) as channel:
        return pb_grpc.AdviceStub(channel).GetState(
            pb.GetStateRequest(switch=switch, port=port, include_flows=include_flows), timeout=timeout_s)
