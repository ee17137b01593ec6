"""Self-healing on the default fabric (soft switch, mode advice).

- A ring all-reduce across the leaves runs; the spine uplink its h2 → h5 flow takes is cut mid-run.
  s3 moves the traffic to the other spine itself (its ECMP members watch their ports); the
  controller sees the carrier go, re-routes every switch and re-plans the advice; the job completes
  with a verified result. Then the link comes back and returns to service after the hold-down.
- Remote repair: the spine's downlink that h6 → h1 crosses is cut. The spine has no other way to s3
  and s4's port toward the spine stays up, so only the controller can move that flow: s4's routes to
  s3's hosts must leave the spine (read back over P4Runtime).
- A direction that loses every frame with its carrier up is found by the probes alone.
- Flapping leaves the switches' tables equal to the routes the controller computes.

The traffic gap on the affected flow is printed (from its sender's TCP state); its goal (≤ 100 ms)
is a figure for bench/failover.py, the bounds here are behaviour with margin.
"""

from __future__ import annotations

import pytest

from controller.routing import compute_routes
from emulation.faults import Fault, inject
from emulation.net import Testbed
from emulation.p4read import read
from lab.failover import cut_during_ring, timeline_row
from tests.checks import wait_until
from topologies import leafspine
from wire.proto import p4r
from workloads.allreduce.job import JobSpec, run_job
from workloads.fabric import FabricView

pytestmark = [pytest.mark.mininet, pytest.mark.root]

# From the carrier's loss, not the cut's onset: closing a port is kernel work a busy machine
# delays (5 ms quiet; 0.2-1 s beside a running ring), printed as "carrier gone" in the timeline.
DETECT_MAX_S = 0.5  # carrier lost → detected (netlink: a few ms; margin for a busy machine)
PROBE_DETECT_MAX_S = 2.0  # a lossy direction → detected by probes (4 periods of 50 ms, and margin)
ADVICE_MAX_S = 0.5  # carrier lost → advice re-planned
PORT_BASE = 21000


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(), dataplane="soft", name="test-failover", mode="advice") as tb:
        yield tb


def test_ring_allreduce_survives_a_spine_uplink_cut_and_the_link_returns(fabric):
    figures = cut_during_ring(fabric, ("h2", "h5"), None, PORT_BASE)
    assert figures["wrong"] == 0
    assert 0 <= figures["detected_ms"] and figures["detected_ms"] - figures["carrier_ms"] <= DETECT_MAX_S * 1e3, figures
    assert figures["route_updates"] > 0
    assert figures["advice_ms"] - figures["carrier_ms"] <= ADVICE_MAX_S * 1e3, figures
    assert figures["back_ms"] >= 500, figures  # not before the hold-down


def test_a_cut_only_a_remote_switch_can_route_around_is_repaired_by_the_controller(fabric):
    """h6 → h1 goes s4 → spine → s3; the spine–s3 link is cut. s4's port to the spine stays up, so
    its switch cannot see the failure: the controller must rewrite s4's routes to s3's hosts."""
    figures = cut_during_ring(fabric, ("h6", "h1"), "s3", PORT_BASE + 100,
                              when_seen=lambda: routes_read_back(fabric, "s4"))
    assert figures["wrong"] == 0
    assert 0 <= figures["detected_ms"] and figures["detected_ms"] - figures["carrier_ms"] <= DETECT_MAX_S * 1e3, figures
    assert figures["advice_ms"] - figures["carrier_ms"] <= ADVICE_MAX_S * 1e3, figures
    spine_port = fabric.topo.find_link("s4", figures["spine"]).port_of("s4")
    to_h1 = figures["seen"][fabric.host("h1").IP()]  # s4's route to h1 (a /32) once the cut was seen
    assert to_h1 and spine_port not in to_h1, (spine_port, to_h1)


def test_a_direction_that_loses_every_frame_is_found_by_probes_and_routed_around(fabric):
    """100% loss s1 → s3 with both carriers up: only the probes can tell. The link is taken out,
    a ring across the leaves completes correctly over the other spine, and once the loss is cleared
    the link returns after the hold-down."""
    link = "s1-s3"
    injected = inject(fabric, Fault("loss", ("s1", "s3"), percent=100)).began
    try:
        assert wait_until(lambda: timeline_row(fabric, link, "down", injected) is not None, PROBE_DETECT_MAX_S + 3.0), \
            f"the probes never found {link} losing frames"
        down = timeline_row(fabric, link, "down", injected)
        assert down is not None
        detected = float(down["detected_wall"]) - injected
        print(f"\n  100% loss s1 -> s3: detected by probes after {detected * 1e3:.0f} ms, "
              f"{down['route_updates']} route updates")
        assert detected <= PROBE_DETECT_MAX_S, detected
        spec = JobSpec(hosts=["h1", "h5", "h2", "h6"], sizes=[1 << 20], algo="ring", iters=2, name="ring-lossy",
                       port_base=PORT_BASE + 200)
        result = run_job(spec, FabricView.of_testbed(fabric), progress=None).results[0]
        assert result.wrong == 0
    finally:
        cleared = inject(fabric, Fault("loss", ("s1", "s3"), percent=0)).began
    assert wait_until(lambda: timeline_row(fabric, link, "up", cleared) is not None, 5.0), \
        f"{link} never returned to service"


def routes_read_back(tb: Testbed, switch: str) -> dict[str, tuple[int, ...]]:
    """prefix → the egress ports its ipv4_lpm entry leads to, as the switch holds them (P4Runtime Read)."""
    schema = tb.schema_of(switch)
    address, device = tb.switches[switch].process.grpc_address, tb.plan.switches[switch].device_id
    profile = schema.id_of("StarIngress.ecmp_selector")
    members = {e.action_profile_member.member_id: e.action_profile_member.action.params[0].value
               for e in read(address, device, p4r.Entity(action_profile_member=p4r.ActionProfileMember(
                   action_profile_id=profile)))}
    groups = {e.action_profile_group.group_id: tuple(sorted(int.from_bytes(members[m.member_id], "big")
                                                            for m in e.action_profile_group.members))
              for e in read(address, device, p4r.Entity(action_profile_group=p4r.ActionProfileGroup(
                  action_profile_id=profile)))}
    out = {}
    for e in read(address, device, p4r.Entity(table_entry=p4r.TableEntry(
            table_id=schema.id_of("StarIngress.ipv4_lpm")))):
        entry = e.table_entry
        prefix = ".".join(str(b) for b in entry.match[0].lpm.value.rjust(4, b"\0"))
        kind = entry.action.WhichOneof("type")
        out[prefix] = (groups[entry.action.action_profile_group_id] if kind == "action_profile_group_id"
                       else (int.from_bytes(members[entry.action.action_profile_member_id], "big"),))
    return out


def test_a_link_flapping_ten_times_in_five_seconds_leaves_the_switches_as_the_controller_routes(fabric):
    link = ("s4", "s2")
    last_up = inject(fabric, Fault("flap", link, count=10, period_s=0.5)).settled
    name = "-".join(sorted(link))
    assert wait_until(lambda: any(r["link"] == name and r["state"] == "up" and float(r["detected_wall"]) >= last_up
                                  for r in fabric.links_timeline()), 5.0), "the link never returned to service"
    rows = [r for r in fabric.links_timeline() if r["link"] == name]
    print(f"\n  {name}: {sum(r['state'] == 'down' for r in rows)} down and {sum(r['state'] == 'up' for r in rows)} "
          f"up in the controller's timeline over 10 flaps")
    assert rows[-1]["state"] == "up"
    expected = compute_routes(fabric.topo, fabric.plan)
    for switch in fabric.topo.switches:
        held = routes_read_back(fabric, switch.name)
        wanted = {r.prefix: tuple(sorted(h.port for h in r.next_hops)) for r in expected[switch.name]}
        assert held == wanted, switch.name
