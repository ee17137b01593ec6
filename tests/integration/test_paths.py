"""Mode paths on a leaf-spine of three spines (soft switch): an ECMP collision made on purpose is
resolved by pinning one flow to another uplink, and a cut uplink takes the flows pinned over it with
the re-route (nothing is left pinned to its port, read back over P4Runtime)."""

from __future__ import annotations

import json

import pytest

from emulation.net import Testbed
from emulation.p4read import read
from emulation.traffic import iperf3_rates, start_iperf3_server
from lab.collisions import colliding_ports
from tests.integration.helpers import wait_until
from topologies import leafspine
from wire import runfiles
from wire.p4info import P4Schema
from wire.proto import p4r

pytestmark = [pytest.mark.mininet, pytest.mark.root]

LINK_MBPS = 20.0
SECONDS = 8
PIN_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(spines=3), dataplane="soft", name="test-paths", mode="paths") as tb:
        yield tb


def pins(tb: Testbed, switch: str) -> dict[tuple[int, int], int]:
    """(src port, dst port) → egress port of every flow_pin entry of `switch`, read over P4Runtime."""
    info = json.loads((tb.run_dir / runfiles.SWITCHES).read_text())["switches"][switch]
    schema = P4Schema.load()
    query = p4r.Entity()
    query.table_entry.table_id = schema.id_of("StarIngress.flow_pin")
    out = {}
    for entity in read(info["grpc"], info["device_id"], query):
        fields = {m.field_id: int.from_bytes(m.exact.value, "big") for m in entity.table_entry.match}
        out[(fields[4], fields[5])] = int.from_bytes(entity.table_entry.action.action.params[0].value, "big")
    return out


def start_flows(tb: Testbed, flows: list[tuple[str, str, int]], seconds: float) -> list[str]:
    """iperf3 flows (src, dst, src port) to port 5201 of dst; returns their JSON output files."""
    files = []
    for src, dst, sport in flows:
        start_iperf3_server(tb.host(dst), 5201)
        out = tb.run_dir / f"iperf-{src}-{dst}-{sport}.json"
        tb.host(src).cmd(f"iperf3 -c {tb.plan.hosts[dst].ip} -p 5201 --cport {sport} -t {seconds} -J "
                         f"> {out} 2>&1 &")
        files.append(str(out))
    return files


def test_an_ecmp_collision_is_resolved_by_pinning_one_flow_elsewhere(fabric):
    a, b = colliding_ports(fabric.topo, ("h1", "h5"), ("h2", "h6"), 40000)
    files = start_flows(fabric, [("h1", "h5", a), ("h2", "h6", b)], SECONDS)
    leaf = fabric.plan.hosts["h1"].switch

    def apart() -> bool:
        now = pins(fabric, leaf)
        return (a, 5201) in now and (b, 5201) in now and now[(a, 5201)] != now[(b, 5201)]
    assert wait_until(apart, PIN_TIMEOUT_S), f"the two flows are not pinned apart: {pins(fabric, leaf)}"
    assert wait_until(lambda: all("end" in open(f).read() for f in files), SECONDS + 15)
    total = sum(iperf3_rates(open(f).read(), f)[0] for f in files)
    # Collided, both would share one 20 Mbit/s uplink (≤ 20 together); apart, each has its own.
    assert total >= 1.3 * LINK_MBPS, f"{total:.1f} Mbit/s together"
    rows = runfiles.read_rows(fabric.run_dir / runfiles.PATHS)
    assert any(r["op"] in ("pin", "move") and int(r["sport"]) in (a, b) for r in rows)


def test_a_cut_uplink_takes_its_pinned_flows_with_the_reroute(fabric):
    a, b = colliding_ports(fabric.topo, ("h1", "h5"), ("h2", "h6"), 41000)
    start_flows(fabric, [("h1", "h5", a), ("h2", "h6", b)], SECONDS)
    leaf = fabric.plan.hosts["h1"].switch
    assert wait_until(lambda: {(a, 5201), (b, 5201)} <= set(pins(fabric, leaf)), PIN_TIMEOUT_S)
    used = pins(fabric, leaf)[(a, 5201)]
    spine = next(link.other(leaf) for link in fabric.topo.links_of(leaf) if link.port_of(leaf) == used)
    fabric.set_link(leaf, spine, up=False)
    try:
        def moved() -> bool:
            now = pins(fabric, leaf)
            return used not in now.values() and {(a, 5201), (b, 5201)} <= set(now)
        assert wait_until(moved, PIN_TIMEOUT_S), f"a flow is still pinned to port {used}: {pins(fabric, leaf)}"
    finally:
        fabric.set_link(leaf, spine, up=True)


def test_mode_flowlet_turns_flowlet_switching_on_in_every_switch_and_off_again(fabric):
    def gaps() -> set[int]:
        schema = P4Schema.load()
        query = p4r.Entity()
        query.table_entry.table_id = schema.id_of("StarIngress.flowlet_config")
        query.table_entry.is_default_action = True
        switches = json.loads((fabric.run_dir / runfiles.SWITCHES).read_text())["switches"]
        return {int.from_bytes(e.table_entry.action.action.params[0].value, "big")
                for info in switches.values() for e in read(info["grpc"], info["device_id"], query)}
    assert gaps() == {0}
    fabric.set_mode("flowlet")
    try:
        assert wait_until(lambda: gaps() == {5000}, PIN_TIMEOUT_S), gaps()
    finally:
        fabric.set_mode("paths")
    assert wait_until(lambda: gaps() == {0}, PIN_TIMEOUT_S), gaps()
