"""The controller's gRPC API (wire/advice.proto) on a Unix socket in the run directory."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc

from controller.advice import AdviceError, AdviceLoop
from controller.faults import FaultError
from controller.localizer import Suspect
from controller.p4rt_client import SwitchError
from controller.telemetry import Collector
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire import runfiles

SOCKET_NAME = runfiles.CONTROLLER_SOCK
T = TypeVar("T")


class Faults(Protocol):
    """What the controller offers beside advice: injected loss and fault localisation (with the
    ranks' step timings as evidence)."""

    async def set_link_loss(self, sender: str, receiver: str, percent: float) -> float: ...

    def diagnosis(self) -> tuple[list[Suspect], list[tuple[float, Suspect]], float]: ...

    def report_steps(self, report: pb.StepReport) -> int: ...


def suspect_message(s: Suspect) -> pb.Suspect:
    return pb.Suspect(target=s.target, fault=s.fault, score=s.score, evidence=s.evidence, since=s.since,
                      alert=s.alert)


def state_message(collector: Collector, request: pb.GetStateRequest, now: float | None = None) -> pb.State:
    now = time.monotonic() if now is None else now
    snap = collector.snapshot()
    state = pb.State(reports=snap.reports, bad_reports=snap.bad_reports)
    for s in sorted(snap.ports.values(), key=lambda p: (p.switch, p.port)):
        switch, port = s.switch, s.port
        if (request.switch and switch != request.switch) or (request.port and port != request.port):
            continue
        message = state.ports.add(switch=switch, port=port, queue_pkts=s.queue_pkts, hop_latency_us=s.hop_latency_us,
                                  capacity_mbps=s.capacity_mbps, age_s=now - s.updated)
        if s.tx_rate_mbps is not None:
            message.has_rate = True
            message.tx_rate_mbps = s.tx_rate_mbps
            message.utilisation = s.utilisation or 0.0
    if request.include_flows:
        for (src, dst, proto, sport, dport), flow in sorted(snap.flows.items()):
            if request.switch and all(h[0] != request.switch for h in flow.hops):
                continue
            flow_message = state.flows.add(src=src, dst=dst, protocol=proto, src_port=sport, dst_port=dport,
                                           age_s=now - flow.updated)
            for switch, in_port, out_port in flow.hops:
                flow_message.hops.add(switch=switch, ingress_port=in_port, egress_port=out_port)
    return state


class AdviceService(pb_grpc.AdviceServicer):
    """gRPC method names are the proto's (N802)."""

    def __init__(self, collector: Collector, loop: AdviceLoop, faults: Faults | None = None) -> None:
        self.collector = collector
        self.loop = loop
        self.faults = faults

    async def Register(self, request: pb.HostInfo, context: grpc.aio.ServicerContext) -> pb.RegisterReply:  # noqa: N802
        await self._call(context, self.loop.register, request.name, request.ip)
        return pb.RegisterReply(mode=self.loop.mode, valid_ms=self.loop.valid_ms)

    async def Subscribe(self, request: pb.SubscribeRequest,  # noqa: N802
                        context: grpc.aio.ServicerContext) -> AsyncIterator[pb.AdviceUpdate]:
        queue = await self._call(context, self.loop.subscribe, request.host)
        try:
            while True:
                item = await queue.get()
                if item[0] == "mode":
                    yield pb.AdviceUpdate(mode=item[1])
                else:
                    yield pb.AdviceUpdate(advice=pb.RateAdvice(dst_ip=item[1], rate_bps=int(item[2]),
                                                               epoch=self.loop.epoch, valid_ms=self.loop.valid_ms))
        finally:
            self.loop.unsubscribe(request.host, queue)

    async def DeclareDemand(self, request: pb.DemandRequest, context: grpc.aio.ServicerContext) -> pb.DemandReply:  # noqa: N802
        rate = request.rate_bps if request.WhichOneof("size") == "rate_bps" else None
        active = await self._call(context, self.loop.declare, request.src, request.dst, rate, request.weight,
                                  request.stop)
        return pb.DemandReply(active_demands=active)

    async def GetState(self, request: pb.GetStateRequest, context: grpc.aio.ServicerContext) -> pb.State:  # noqa: N802
        return state_message(self.collector, request)

    async def GetAdvice(self, request: pb.GetAdviceRequest, context: grpc.aio.ServicerContext) -> pb.AdviceTable:  # noqa: N802
        now = time.monotonic()
        table = pb.AdviceTable(mode=self.loop.mode, decisions=self.loop.decisions)
        host_ip = self.loop.plan.hosts[request.host].ip if request.host in self.loop.plan.hosts else None
        if request.host and host_ip is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetAdviceRequest.host: no host {request.host!r}")
        for (src, dst), rate in sorted(self.loop.sent.items()):
            if host_ip is None or src == host_ip:
                table.entries.add(src=src, dst=dst, rate_bps=int(rate), epoch=self.loop.epoch,
                                  age_s=now - self.loop.sent_at.get((src, dst), now))
        return table

    async def SetMode(self, request: pb.ModeRequest, context: grpc.aio.ServicerContext) -> pb.ModeReply:  # noqa: N802
        await self._call(context, self.loop.set_mode, request.mode)
        return pb.ModeReply(mode=self.loop.mode)

    async def SetLinkLoss(self, request: pb.LinkLossRequest,  # noqa: N802
                          context: grpc.aio.ServicerContext) -> pb.LinkLossReply:
        if self.faults is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this controller injects no faults")
        assert self.faults is not None
        try:
            percent = await self.faults.set_link_loss(request.sender, request.receiver, request.percent)
        except FaultError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except SwitchError as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return pb.LinkLossReply(percent=percent)

    async def Diagnose(self, request: pb.DiagnoseRequest, context: grpc.aio.ServicerContext) -> pb.Diagnosis:  # noqa: N802
        if self.faults is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this controller does not localise faults")
        assert self.faults is not None
        suspects, alerts, updated = self.faults.diagnosis()
        return pb.Diagnosis(suspects=[suspect_message(s) for s in suspects],
                            alerts=[pb.Alert(time=t, suspect=suspect_message(s)) for t, s in alerts], updated=updated)

    async def ReportSteps(self, request: pb.StepReport, context: grpc.aio.ServicerContext) -> pb.StepReportReply:  # noqa: N802
        if self.faults is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this controller does not localise faults")
        assert self.faults is not None
        try:
            hosts = self.faults.report_steps(request)
        except FaultError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.StepReportReply(hosts=hosts)

    @staticmethod
    async def _call(context: grpc.aio.ServicerContext, method: Callable[..., T], *args: Any) -> T:
        try:
            return method(*args)
        except AdviceError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


async def start_server(run_dir: Path, collector: Collector, loop: AdviceLoop, faults: Faults | None = None,
                       socket_path: Path | None = None) -> tuple[grpc.aio.Server, Path | None]:
    """Serve the API on unix:<run_dir>/controller.sock, or `socket_path` (or in a short temporary directory
    when that path is too long for a Unix socket: that directory is returned second, for the caller to
    remove); the address used is written to <run_dir>/controller.addr."""
    path, short = runfiles.unix_socket_path(socket_path or run_dir / SOCKET_NAME)
    server = grpc.aio.server()
    pb_grpc.add_AdviceServicer_to_server(AdviceService(collector, loop, faults), server)
    path.unlink(missing_ok=True)
    address = f"unix:{path}"
    server.add_insecure_port(address)
    await server.start()
    (run_dir / runfiles.CONTROLLER_ADDR).write_text(address + "\n")
    return server, short

