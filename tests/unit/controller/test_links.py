"""Link liveness from probes (controller/links.py) and the re-route's route diff (controller/program.py)."""

from __future__ import annotations

from controller.links import LinkMonitor, fabric_ports, parse_probe, probe_device_config, probe_frame
from controller.program import RouteState, route_updates
from controller.routing import compute_routes
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire.p4info import P4Schema
from wire.probes import read_device_config
from wire.proto import p4r

TOPO = leafspine()
PLAN = AddressPlan(TOPO)
PERIOD = 0.010


def feed(monitor: LinkMonitor, t: float, skip: set[tuple[str, int]] = frozenset(), into: set[str] = frozenset()
         ) -> list:
    """One probe period at time t: every fabric end's probe (sent at t) arrives at its neighbour,
    unless its origin is in `skip` or its receiving switch is in `into`."""
    for state in monitor.links.values():
        for origin, at in ((state.a, state.b), (state.b, state.a)):
            if origin not in skip and at[0] not in into:
                monitor.received(origin, at, t)
    return monitor.tick(t)


def test_probe_frames_name_their_origin():
    names = {PLAN.switches[s.name].device_id: s.name for s in TOPO.switches}
    assert parse_probe(probe_frame(PLAN, "s3", 5, 7.25), names) == (("s3", 5), 7.25)
    assert parse_probe(probe_frame(PLAN, "s3", 5, 7.25), {}) is None  # a device we do not know
    assert parse_probe(b"\x00" * 10, names) is None


def test_a_soft_switch_is_asked_for_probes_out_of_its_fabric_ports_from_their_macs():
    leaf = PLAN.hosts["h1"].switch  # the default leaf-spine: two spines, so two fabric ports a leaf
    host_ports = {PLAN.hosts[h.name].switch_port for h in TOPO.hosts if PLAN.hosts[h.name].switch == leaf}
    ports = fabric_ports(TOPO, leaf)
    assert len(ports) == 2 and not host_ports & set(ports)
    schedule = read_device_config(probe_device_config(TOPO, PLAN, leaf, 0.05))
    assert schedule is not None and schedule.period_s == 0.05 and sorted(schedule.ports) == ports
    assert all(schedule.ports[p] == bytes.fromhex(PLAN.mac_of(leaf, p).replace(":", "")) for p in ports)
    assert probe_device_config(TOPO, PLAN, leaf, 0.0) == b""  # probes off


def test_a_silent_direction_takes_the_link_down_after_the_misses_then_back_after_the_hold_down():
    monitor = LinkMonitor(TOPO, 0.0, PERIOD, misses=3, hold_down_s=0.1)
    end = monitor.ends()[0]
    t = 0.0
    for _ in range(20):
        t += PERIOD
        assert feed(monitor, t) == []
    changes = []
    for _ in range(5):  # 50 ms of silence from one end
        t += PERIOD
        changes += feed(monitor, t, skip={end})
    assert [(c.up, end in c.ends) for c in changes] == [(False, True)]
    assert monitor.down() == {changes[0].link}
    # probes again: up only once they have flowed for the hold-down, and a gap restarts it
    for _ in range(6):
        t += PERIOD
        assert feed(monitor, t) == []
    for _ in range(4):
        t += PERIOD
        assert feed(monitor, t, skip={end}) == []
    back = []
    for _ in range(15):
        t += PERIOD
        back += feed(monitor, t)
    assert [c.up for c in back] == [True] and monitor.down() == set()


def test_a_lost_carrier_fails_its_link_at_once_and_it_returns_only_with_carrier_probes_and_hold_down():
    monitor = LinkMonitor(TOPO, 0.0, PERIOD, misses=3, hold_down_s=0.1)
    t = PERIOD
    assert feed(monitor, t) == []
    end = ("s3", TOPO.find_link("s3", "s1").port_of("s3"))
    changes = monitor.port_status(end, False, t + 0.001)
    assert [(c.up, c.link) for c in changes] == [(False, frozenset(("s3", "s1")))]
    assert monitor.port_status(end, False, t + 0.002) == []  # the other end's event: already down
    for _ in range(30):  # probes still arrive (say, from a stale event): carrier down keeps it down
        t += PERIOD
        assert feed(monitor, t) == []
    monitor.port_status(end, True, t)
    back = []
    for _ in range(15):
        t += PERIOD
        back += feed(monitor, t)
    assert [c.up for c in back] == [True] and monitor.down() == set()
    assert monitor.port_status(("s9", 1), False, t) == []  # not a fabric end: ignored


def silent_s3(monitor: LinkMonitor, periods: int, t: float, lost: frozenset[str] = frozenset()) -> tuple[float, list]:
    """`periods` probe periods in which s3 punts nothing (its probes out still arrive elsewhere)."""
    changes = []
    for _ in range(periods):
        t += PERIOD
        for state in monitor.links.values():
            for origin, at in ((state.a, state.b), (state.b, state.a)):
                if at[0] != "s3":
                    monitor.received(origin, at, t)
        changes += monitor.tick(t, lost)
    return t, changes


def test_a_switch_that_hears_nothing_is_a_stall_until_stall_s_without_its_stream_or_hung_s_with_it():
    s3_links = sorted([frozenset(("s3", "s1")), frozenset(("s3", "s2"))])
    for lost, quiet_for in ((frozenset({"s3"}), 0.5), (frozenset(), 1.5)):
        monitor = LinkMonitor(TOPO, 0.0, PERIOD, misses=3, stall_s=0.5, hung_s=1.5)
        t = 0.0
        for _ in range(10):
            t += PERIOD
            assert feed(monitor, t) == []
        t, changes = silent_s3(monitor, int(quiet_for / PERIOD) - 5, t, lost)
        assert changes == []  # starved or gone, s3 is given its time
        t, changes = silent_s3(monitor, 15, t, lost)
        assert sorted(c.link for c in changes) == s3_links
        assert all(("without a stream" in c.why) == bool(lost) for c in changes)


def test_silence_from_every_switch_at_once_is_the_way_not_every_link():
    monitor = LinkMonitor(TOPO, 0.0, PERIOD, misses=3, stall_s=0.5)
    t = 0.0
    for _ in range(10):
        t += PERIOD
        assert feed(monitor, t) == []
    for _ in range(100):  # 1 s: the controller ticks on time, but no probe arrives from anywhere
        t += PERIOD
        assert monitor.tick(t) == []
    t += PERIOD
    assert feed(monitor, t) == []  # the backlog clears: every link was up all along
    assert not monitor.down()


def test_a_stalled_controller_does_not_take_its_own_stall_for_failed_links():
    monitor = LinkMonitor(TOPO, 0.0, PERIOD)
    assert feed(monitor, PERIOD) == []
    assert monitor.tick(PERIOD + 0.3) == []  # 300 ms without looking: nothing could be counted
    assert feed(monitor, PERIOD + 0.31) == []


def _lpm_targets(updates: list[p4r.Update]) -> list[tuple[int, str]]:
    out = []
    for u in updates:
        if u.entity.WhichOneof("entity") == "table_entry":
            out.append((u.type, u.entity.table_entry.action.WhichOneof("type") or ""))
    return out


def test_a_reroute_writes_only_the_routes_that_change_and_a_restore_writes_them_back():
    schema = P4Schema.load()
    state = RouteState()
    full = route_updates(schema, compute_routes(TOPO, PLAN)["s3"], state)
    assert len(full) > 8 and all(u.type == p4r.Update.INSERT for u in full)
    assert route_updates(schema, compute_routes(TOPO, PLAN)["s3"], state) == []  # nothing changed
    down = {frozenset(("s3", "s1"))}
    reroute = route_updates(schema, compute_routes(TOPO, PLAN, down)["s3"], state)
    lpm = _lpm_targets(reroute)
    # s3's routes to s4's four hosts leave their two-spine group for the one member left
    assert lpm == [(p4r.Update.MODIFY, "action_profile_member_id")] * 4, lpm
    assert all(u.type != p4r.Update.DELETE for u in reroute)
    restore = route_updates(schema, compute_routes(TOPO, PLAN)["s3"], state)
    assert _lpm_targets(restore) == [(p4r.Update.MODIFY, "action_profile_group_id")] * 4
    assert all(u.entity.WhichOneof("entity") == "table_entry" for u in restore)  # the group was kept
