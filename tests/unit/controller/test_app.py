"""The real Controller against in-process soft-switch P4Runtime servers (no root, no Mininet): it
programs every switch of the default fabric, and a failed write names the switch and the update."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from controller import entities as ent
from controller.app import Controller
from controller.p4rt_client import SwitchError, SwitchSession
from controller.routing import compute_routes
from softswitch.p4rt_server import Device, P4RuntimeService, serve
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire.cpu import REPORT_SESSION
from wire.p4info import P4Schema


@pytest.fixture()
def fabric(tmp_path):
    """One in-process P4Runtime server per switch of the default leaf-spine, and a run directory
    that names them as the testbed would."""
    topo = leafspine()
    plan = AddressPlan(topo)
    schema = P4Schema.load()
    servers, devices, described = [], {}, {}
    for sw in topo.switches:
        device_id = plan.switches[sw.name].device_id
        pipeline = Pipeline(RuntimeState(schema))
        device = Device(device_id, 255, lambda s, state, p=pipeline: p.bind(state), lambda port, data: None)
        server, port = serve(P4RuntimeService(device), "127.0.0.1:0")
        servers.append(server)
        devices[sw.name] = device
        described[sw.name] = {"grpc": f"127.0.0.1:{port}", "device_id": device_id, "kind": "soft"}
    (tmp_path / "topology.yaml").write_text(topo.to_yaml())
    (tmp_path / "switches.json").write_text(json.dumps({"switches": described}))
    yield topo, plan, schema, devices, tmp_path
    for server in servers:
        server.stop(0)


def test_the_controller_programs_every_switch_of_the_fabric(fabric):
    topo, plan, schema, devices, run_dir = fabric
    controller = Controller(run_dir, schema)

    async def run() -> None:
        await controller.start()
        await asyncio.gather(*(s.close() for s in controller.sessions.values()))
    asyncio.run(run())
    controller.collector.close()
    controller.advice.close()
    routes = compute_routes(topo, plan)
    ready = json.loads((run_dir / "controller.ready").read_text())
    assert set(ready) == {s.name for s in topo.switches}
    for name, device in devices.items():
        state = device.state
        assert state is not None, f"{name}: no pipeline"
        lpm = state.table_by_name("StarIngress.ipv4_lpm")
        assert len(lpm.entries) == len(routes[name]) == len(topo.hosts)
        assert len(state.table_by_name("StarIngress.port_role").exact_index) == len(topo.links_of(name))
        assert REPORT_SESSION in state.clone_sessions
        node = state.table_by_name("StarEgress.int_node").default_action
        assert node.name == "StarEgress.set_node_id" and node.args == (plan.switches[name].device_id, 0x20)
        assert state.value_sets.by_name("StarParser.int_dscp") == {0x20}  # the default INT DSCP, CS4


def test_a_failed_write_names_the_switch_and_the_failing_update(fabric):
    _, _, schema, devices, run_dir = fabric
    described = json.loads((run_dir / "switches.json").read_text())["switches"]["s1"]
    bad = ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": ("10.9.0.0", 16)}, member_id=77)

    async def run() -> str:
        session = SwitchSession("s1", described["grpc"], described["device_id"], schema)
        await session.connect()
        await session.set_pipeline()
        member = ent.member(schema, "StarIngress.ecmp_selector", 1, ent.action(
            schema, "StarIngress.set_nhop", port=1, smac="02:00:00:00:00:01", dmac="02:00:00:00:00:02"))
        try:
            await session.write([ent.insert(member), ent.insert(bad)])
        except SwitchError as exc:
            return str(exc)
        finally:
            await session.close()
        return ""
    message = asyncio.run(run())
    assert message.startswith("switch s1: write failed: UNKNOWN"), message
    assert "update 1 (INSERT table_entry): NOT_FOUND" in message and "1 of 2 in the batch failed" in message
    assert grpc.StatusCode.NOT_FOUND.name in message
