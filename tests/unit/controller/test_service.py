"""The controller's advice API in-process: validation names the field; advice reaches a subscriber."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from controller.advice import AdviceLoop
from controller.service import start_server
from controller.telemetry import Collector
from tests.unit.controller.test_telemetry import hop, report
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc


def run(coro):
    return asyncio.run(coro)


async def with_api(tmp_path, body, mode="advice"):
    topo = leafspine()
    plan = AddressPlan(topo)
    collector = Collector({plan.switches[s.name].device_id: s.name for s in topo.switches})
    loop = AdviceLoop(topo, plan, collector, tmp_path, mode)
    server, _ = await start_server(tmp_path, collector, loop)
    try:
        address = (tmp_path / "controller.addr").read_text().strip()
        async with grpc.aio.insecure_channel(address) as channel:
            await body(pb_grpc.AdviceStub(channel), loop, collector, plan)
    finally:
        await server.stop(0)
        loop.close()


@pytest.mark.parametrize("call, field", [
    (lambda s: s.Register(pb.HostInfo(name="h1", ip="10.0.3.x")), "HostInfo.ip"),
    (lambda s: s.Register(pb.HostInfo(name="h99", ip="10.0.3.1")), "HostInfo.name"),
    (lambda s: s.Register(pb.HostInfo(name="h1", ip="10.0.3.2")), "HostInfo.ip"),
    (lambda s: s.DeclareDemand(pb.DemandRequest(src="10.9.9.9", dst="10.0.4.1", rate_bps=1)), "DemandRequest.src"),
    (lambda s: s.DeclareDemand(pb.DemandRequest(src="10.0.3.1", dst="10.0.3.1")), "DemandRequest.dst"),
    (lambda s: s.SetMode(pb.ModeRequest(mode="fast")), "ModeRequest.mode"),
    (lambda s: s.GetAdvice(pb.GetAdviceRequest(host="h42")), "GetAdviceRequest.host"),
])
def test_invalid_requests_get_invalid_argument_naming_the_field(tmp_path, call, field):
    async def body(stub, *_):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(stub)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in info.value.details()
    run(with_api(tmp_path, body))


def test_unregistered_subscriber_is_refused(tmp_path):
    async def body(stub, *_):
        call = stub.Subscribe(pb.SubscribeRequest(host="h1"))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "has not registered" in info.value.details()
    run(with_api(tmp_path, body))


def test_a_flow_seen_in_int_becomes_advice_for_its_source(tmp_path):
    async def body(stub, loop, collector, plan):
        reply = await stub.Register(pb.HostInfo(name="h1", ip="10.0.3.1"))
        assert reply.mode == "advice"
        call = stub.Subscribe(pb.SubscribeRequest(host="h1"))
        assert (await call.read()).mode == "advice"
        ids = {name: plan.switches[name].device_id for name in ("s1", "s3", "s4")}
        # h1 → h5 through s3, s1, s4 (a report lists hops newest first)
        collector.feed(report([hop(ids["s4"], 1, 0, 10), hop(ids["s1"], 2, 0, 10), hop(ids["s3"], 5, 0, 10)],
                              payload=bytes(1400)))  # a full segment: a transfer's
        loop.step()
        update = await asyncio.wait_for(call.read(), 3)
        assert update.advice.dst_ip == "10.0.4.1" and update.advice.rate_bps == int(20e6)  # alone: its line rate
        table = await stub.GetAdvice(pb.GetAdviceRequest(host="h1"))
        assert [(e.src, e.dst) for e in table.entries] == [("10.0.3.1", "10.0.4.1")]
        await stub.SetMode(pb.ModeRequest(mode="none"))
        kinds = [await asyncio.wait_for(call.read(), 3) for _ in range(2)]
        assert {k.WhichOneof("kind") for k in kinds} == {"mode", "advice"}
        assert [k.advice.rate_bps for k in kinds if k.WhichOneof("kind") == "advice"] == [0]  # back to line rate
        call.cancel()
    run(with_api(tmp_path, body))
