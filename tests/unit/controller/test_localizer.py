"""Fault localisation from readings (controller/localizer.py): each kind of evidence pins its fault,
a suspect becomes an alert only when it persists, and a healthy busy fabric raises none."""

from __future__ import annotations

from controller.localizer import Localizer
from topologies import leafspine, railopt

TOPO = leafspine()  # 20 Mbit/s links
S3_S1 = TOPO.find_link("s3", "s1")
P31, P13 = S3_S1.port_of("s3"), S3_S1.port_of("s1")


def busy(t: float, lost: float = 0.0, s3_rate_mbps: float = 18.0) -> dict:
    """Cumulative counters after t seconds of every fabric direction carrying 1,500 frames/s (1500 B);
    s3 -> s1 sends at s3_rate_mbps and loses `lost` of it before s1's port_rx."""
    counters = {}
    for link in TOPO.links:
        if TOPO.is_switch(link.a) and TOPO.is_switch(link.b):
            ends = ((link.a, link.a_port, link.b, link.b_port), (link.b, link.b_port, link.a, link.a_port))
            for a, ap, b, bp in ends:
                pps = (s3_rate_mbps * 1e6 / 12000) if (a, b) == ("s3", "s1") else 1500
                sent = int(pps * t)
                got = int(sent * (1 - lost)) if (a, b) == ("s3", "s1") else sent
                rx, tx, txb = counters.get((b, bp), (0, 0, 0))
                counters[(b, bp)] = (rx + got, tx, txb)
                rx, tx, txb = counters.get((a, ap), (0, 0, 0))
                counters[(a, ap)] = (rx, tx + sent, txb + sent * 1500)
    return counters


def run(loc: Localizer, seconds: int, start: int = 0, **kw) -> list:
    out = []
    for t in range(start, start + seconds):
        out = loc.update(float(t), busy(float(t), **{k: v for k, v in kw.items() if k in ("lost", "s3_rate_mbps")}),
                         kw.get("down", set()), kw.get("lows", {}), kw.get("drains", {}))
    return out


def test_a_healthy_busy_fabric_has_no_suspect():
    loc = Localizer(TOPO)
    lows = {(s.name, p): (300, 2) for s in TOPO.switches for p in (1, 2)}
    assert run(loc, 6, lows=lows, drains={("s3", P31): [19.9] * 40}) == [] and loc.alerts == []


def test_a_lossy_direction_is_pinned_to_its_link_from_counters_and_alerts_when_it_persists():
    loc = Localizer(TOPO)
    run(loc, 3)
    first = loc.update(3.0, busy(3.0, lost=0.03), set(), {}, {})
    assert [(s.target, s.fault, s.alert) for s in first] == [("link s1-s3", "loss", False)]
    top = run(loc, 2, start=4, lost=0.03)[0]
    assert (top.target, top.alert) == ("link s1-s3", True) and "s3 -> s1" in top.evidence
    assert [s.target for _, s in loc.alerts] == ["link s1-s3"]


def test_one_burst_of_lost_frames_is_a_suspect_for_its_window_but_no_alert():
    """A receiving switch that stalls overflows its socket once: a loss for the two seconds it stays
    in the window, fewer than the three ticks a loss must persist."""
    loc = Localizer(TOPO)
    seen = []
    for t in range(8):
        counters = busy(float(t))
        if t >= 3:
            rx, tx, txb = counters[("s1", P13)]
            counters[("s1", P13)] = (rx - 150, tx, txb)
        seen.append([(s.fault, s.alert) for s in loc.update(float(t), counters, set(), {}, {})])
    assert seen[3] == [("loss", False)] and seen[4] == [("loss", False)] and seen[5:] == [[], [], []]
    assert loc.alerts == []


def test_frames_in_flight_when_a_link_is_cut_are_not_a_loss():
    loc = Localizer(TOPO)
    run(loc, 3)
    counters = busy(3.0, lost=0.03)
    assert [s.fault for s in loc.update(3.0, counters, {frozenset(("s1", "s3"))}, {}, {})] == ["down"]


def test_a_port_draining_below_capacity_while_backlogged_is_a_slow_link():
    loc = Localizer(TOPO)
    top = run(loc, 3, drains={("s3", P31): [9.8, 10.1, 9.9, 10.0, 10.2] * 6})[0]
    assert (top.target, top.fault) == ("link s1-s3", "slow-port") and "10.0 of 20" in top.evidence
    # draining at capacity is congestion, not a fault; too few samples say nothing
    assert run(Localizer(TOPO), 3, drains={("s3", P31): [19.5, 20.1, 19.8, 19.9, 20.0] * 6}) == []
    assert run(Localizer(TOPO), 3, drains={("s3", P31): [9.0] * 10}) == []


def test_a_switch_that_holds_every_frame_is_a_slow_switch():
    lows = {(s.name, p): (300, 1) for s in TOPO.switches for p in (1, 2, 3)}
    lows.update({("s2", p): (5300, 1) for p in (1, 2, 3)})
    lows[("s1", 1)] = (9000, 12)  # a queue of 12 at 20 Mbit/s explains 7.2 ms of it: not slow
    top = run(Localizer(TOPO), 3, lows=lows)
    assert [(s.target, s.fault) for s in top] == [("switch s2", "slow-switch")]


def test_a_frame_that_waited_for_a_slow_links_tokens_does_not_make_its_switch_slow():
    """At 1 Mbit/s a frame is 12 ms on the wire: one that found its queue empty still waited up to
    that long for the port's tokens (it used to raise slow-switch on every switch of a 1 Mbit/s path)."""
    slow_links = leafspine(capacity_mbps=1)
    lows = {(s.name, p): (11_500, 0) for s in slow_links.switches for p in (1, 2, 3)}
    assert run(Localizer(slow_links), 3, lows=lows) == []
    lows.update({("s2", p): (17_000, 0) for p in (1, 2, 3)})  # 5 ms more than a frame's time
    assert [(s.target, s.fault) for s in run(Localizer(slow_links), 3, lows=lows)] == [("switch s2", "slow-switch")]


def test_a_down_link_is_the_top_suspect():
    top = run(Localizer(TOPO), 2, down={frozenset(("s1", "s3"))}, lost=0.0)
    assert (top[0].target, top[0].fault, top[0].alert) == ("link s1-s3", "down", True)


def report_work(loc: Localizer, t: float, slow: str | None = None, slow_s: float = 0.04) -> None:
    """Every host's ranks report 7 received steps at t: 0.3 ms of work each, `slow_s` on `slow`."""
    for h in TOPO.hosts:
        loc.add_steps(t, h.name, [slow_s if h.name == slow else 0.0003] * 7)


def test_a_host_whose_own_work_per_step_dwarfs_its_peers_is_a_slow_host():
    loc = Localizer(TOPO)
    for t in range(6):
        report_work(loc, float(t), slow="h3" if t >= 2 else None)
        loc.update(float(t), busy(float(t)), set(), {}, {})
    top = loc.ranked()[0]
    assert (top.target, top.fault, top.alert) == ("host h3", "slow-host", True)
    assert "40.0 ms" in top.evidence and "0.30 ms" in top.evidence
    assert [s.target for _, s in loc.alerts] == ["host h3"]


def test_on_multi_gpu_servers_the_evidence_names_the_gpu_its_server_and_rail():
    topo = railopt(servers=2, gpus=2, spines=1)  # rails s2 (h1, h3), s3 (h2, h4)
    loc = Localizer(topo)
    for t in range(6):
        for h in topo.hosts:
            loc.add_steps(float(t), h.name, [0.04 if h.name == "h3" and t >= 2 else 0.0003] * 7)
        loc.update(float(t), {}, {frozenset(("h2", "s3"))}, {}, {})
    found = {s.target: s.evidence for s in loc.ranked()}
    assert found["host h3"].startswith("GPU h3 of srv2 (rail s2): its ranks' own work"), found
    assert found["link h2-s3"].startswith("NIC of GPU h2 of srv1 (rail s3): carrier lost"), found
    assert "GPU" not in "".join(s.evidence for s in run(Localizer(TOPO), 2, down={frozenset(("h1", "s3"))}))


def test_step_timings_age_out_and_a_lone_or_uniformly_slow_set_of_hosts_is_no_suspect():
    loc = Localizer(TOPO)
    for t in range(4):  # every host equally slow: a heavy job, not a slow host
        for h in TOPO.hosts:
            loc.add_steps(float(t), h.name, [0.02] * 7)
        assert loc.update(float(t), busy(float(t)), set(), {}, {}) == []
    loc = Localizer(TOPO)
    loc.add_steps(0.0, "h1", [0.05] * 20)
    loc.add_steps(0.0, "h2", [0.0003] * 20)
    assert loc.update(0.0, busy(0.0), set(), {}, {}) == []  # one peer is too few to compare with
    report_work(loc, 1.0, slow="h1")
    assert loc.update(1.0, busy(1.0), set(), {}, {})[0].target == "host h1"
    assert loc.update(10.0, busy(10.0), set(), {}, {}) == [] and loc.step_work == {}  # the reports aged out


def test_a_degraded_nvlink_is_named_by_its_speed_and_the_gpus_it_starves_are_not():
    from controller.localizer import NvLinkReading

    topo = railopt(servers=2, gpus=4, spines=1)  # NVLink 8x the NICs' rate
    nominal = topo.nvlink_mbps("h1")
    readings = {
        "h2": NvLinkReading(0.25 * nominal, nominal, 2 << 20, 0.25 * nominal),  # trained down to a quarter
        "h3": NvLinkReading(0.999 * nominal, nominal, 2 << 20, 0.25 * nominal),  # fed by h2: as slow, but healthy
        "h1": NvLinkReading(nominal, nominal, 16 << 20, 0.98 * nominal),
    }
    loc = Localizer(topo)
    for t in range(3):
        found = loc.update(float(t), {}, set(), {}, {}, readings)
    assert [(s.target, s.fault, s.alert) for s in found] == [("link h2-srv1", "slow-nvlink", True)]
    assert found[0].evidence.startswith(f"NVLink of GPU h2 of srv1: runs at {0.25 * nominal:.1f} of {nominal:g} "
                                        "Mbit/s (its link speed); it carried 2.1 MB"), found[0].evidence
    assert found[0].score > 0.8
