"""Injected link loss (controller/faults.py): the fault_inject writes for each change, the errors
naming the field, and the API's answers to bad requests; the ranks' step reports checked the same way."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from controller.advice import AdviceLoop
from controller.faults import PROB_STEPS, FaultError, LinkLoss, step_work
from controller.localizer import Localizer
from controller.service import start_server
from controller.telemetry import Collector
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire.p4info import P4Schema
from wire.proto import p4r

TOPO = leafspine()
SCHEMA = P4Schema.load()


def test_loss_is_written_on_the_receiving_switch_as_insert_modify_delete():
    loss = LinkLoss(TOPO)
    port = TOPO.find_link("s1", "s3").port_of("s3")
    installed, updates = loss.set(SCHEMA, "s1", "s3", 2.0)
    assert abs(installed - 2.0) < 100 / PROB_STEPS
    (update,) = updates
    entry = update.entity.table_entry
    assert update.type == p4r.Update.INSERT and entry.table_id == SCHEMA.id_of("StarIngress.fault_inject")
    assert int.from_bytes(entry.match[0].ternary.value, "big") == port and len(entry.match) == 1  # IPv4 wildcarded
    assert int.from_bytes(entry.action.action.params[0].value, "big") == round(0.02 * PROB_STEPS)
    assert loss.set(SCHEMA, "s1", "s3", 2.0)[1] == []  # no change, no write
    installed, (update,) = loss.set(SCHEMA, "s1", "s3", 100)
    assert installed == 100 and update.type == p4r.Update.MODIFY
    assert update.entity.table_entry.action.action.action_id == SCHEMA.id_of("StarIngress.fault_drop")
    assert [u.entity.table_entry.match[0].ternary.value for u in loss.restore(SCHEMA, "s3")] == [
        update.entity.table_entry.match[0].ternary.value]
    assert loss.restore(SCHEMA, "s1") == []  # the other end holds nothing
    installed, (update,) = loss.set(SCHEMA, "s1", "s3", 0)
    assert installed == 0 and update.type == p4r.Update.DELETE and loss.steps == {}


@pytest.mark.parametrize(("sender", "receiver", "percent", "field"), [
    ("s9", "s3", 5, "LinkLossRequest.sender"),
    ("s1", "h1", 5, "LinkLossRequest.receiver"),
    ("s1", "s2", 5, "no link between s1 and s2"),
    ("s1", "s3", 120, "LinkLossRequest.percent"),
    ("s1", "s3", -1, "LinkLossRequest.percent"),
])
def test_bad_requests_name_the_field(sender, receiver, percent, field):
    with pytest.raises(FaultError, match=field):
        LinkLoss(TOPO).set(SCHEMA, sender, receiver, percent)


HOST_BY_IP = {a.ip: name for name, a in AddressPlan(TOPO).hosts.items()}
H2_IP = AddressPlan(TOPO).hosts["h2"].ip


def report(**step) -> pb.StepReport:
    return pb.StepReport(host=H2_IP, job="j", rank=1, world=4, iteration=3, steps=[
        pb.StepTime(step=0, send=True, peer="10.0.0.9", bytes=4096, start_s=0.0, duration_s=0.1),
        pb.StepTime(**{"step": 0, "send": False, "peer": "10.0.0.9", "bytes": 4096, "start_s": 0.0,
                       "duration_s": 0.1, "compute_s": 0.02, **step})])


def test_a_step_report_gives_its_host_and_the_work_of_its_received_steps():
    assert step_work(report(), HOST_BY_IP) == ("h2", [0.02])


@pytest.mark.parametrize(("change", "field"), [
    ({"compute_s": -0.001}, r"StepReport.steps\[1\].compute_s"),
    ({"duration_s": float("nan")}, r"StepReport.steps\[1\].duration_s"),
    ({"start_s": float("inf")}, r"StepReport.steps\[1\].start_s"),
])
def test_bad_step_reports_name_the_field(change, field):
    with pytest.raises(FaultError, match=field):
        step_work(report(**change), HOST_BY_IP)
    with pytest.raises(FaultError, match="StepReport.host"):
        step_work(pb.StepReport(host="192.0.2.1"), HOST_BY_IP)


class Faults:
    """The controller's set_link_loss without switches (the writes are computed and kept), and its
    step reports into a localiser."""

    def __init__(self) -> None:
        self.loss = LinkLoss(TOPO)
        self.written: list[p4r.Update] = []
        self.localizer = Localizer(TOPO)

    async def set_link_loss(self, sender: str, receiver: str, percent: float) -> float:
        installed, updates = self.loss.set(SCHEMA, sender, receiver, percent)
        self.written += updates
        return installed

    def report_steps(self, request: pb.StepReport) -> int:
        return self.localizer.add_steps(0.0, *step_work(request, HOST_BY_IP))


async def with_api(tmp_path, faults, body):
    plan = AddressPlan(TOPO)
    collector = Collector({plan.switches[s.name].device_id: s.name for s in TOPO.switches})
    loop = AdviceLoop(TOPO, plan, collector, tmp_path, "none")
    server, _ = await start_server(tmp_path, collector, loop, faults)
    try:
        async with grpc.aio.insecure_channel((tmp_path / "controller.addr").read_text().strip()) as channel:
            await body(pb_grpc.AdviceStub(channel))
    finally:
        await server.stop(0)
        loop.close()


def test_the_api_sets_loss_and_answers_invalid_argument_or_unimplemented(tmp_path):
    faults = Faults()

    async def body(stub):
        reply = await stub.SetLinkLoss(pb.LinkLossRequest(sender="s2", receiver="s4", percent=50))
        assert abs(reply.percent - 50) < 0.01 and len(faults.written) == 1
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SetLinkLoss(pb.LinkLossRequest(sender="s2", receiver="s9", percent=50))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "receiver" in info.value.details()
        assert (await stub.ReportSteps(report())).hosts == 1
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ReportSteps(report(compute_s=-1.0))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "compute_s" in info.value.details()

    asyncio.run(with_api(tmp_path, faults, body))

    async def unimplemented(stub):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SetLinkLoss(pb.LinkLossRequest(sender="s2", receiver="s4", percent=50))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ReportSteps(report())
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED

    bare = tmp_path / "bare"
    bare.mkdir()
    asyncio.run(with_api(bare, None, unimplemented))
