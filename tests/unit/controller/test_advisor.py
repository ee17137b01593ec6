"""The advisor on cases checkable by hand."""

from __future__ import annotations

import pytest

from controller.advisor import AdvisorParams, Demand, LinkState, advise, changed, water_fill
from wire.stats import jain_index

M = 1e6
NO_HEADROOM = AdvisorParams(eta=1.0, drain_s=0.0)


def test_two_flows_on_one_link_split_it():
    rates = advise([Demand("a", "x", ("L",)), Demand("b", "x", ("L",))], {"L": LinkState(20 * M)})
    assert rates == {("a", "x"): pytest.approx(9.5 * M), ("b", "x"): pytest.approx(9.5 * M)}  # η = 0.95


def test_parking_lot():
    # Links L1, L2 in a row: flow 0 crosses both, flows 1 and 2 one each; all 10 Mbit/s.
    demands = [Demand("s0", "d", ("L1", "L2")), Demand("s1", "d", ("L1",)), Demand("s2", "d", ("L2",))]
    assert water_fill(demands, {"L1": 10 * M, "L2": 10 * M}) == pytest.approx([5 * M, 5 * M, 5 * M])
    # With L2 at 4 Mbit/s: flows on L2 get 2 each; flow 1 takes what L1 has left (8).
    assert water_fill(demands, {"L1": 10 * M, "L2": 4 * M}) == pytest.approx([2 * M, 8 * M, 2 * M])


def test_incast_n_to_one_shares_the_receiver_link_and_weights_count():
    senders = [f"h{i}" for i in range(6)]
    links = {"down": LinkState(20 * M), **{f"up-{s}": LinkState(20 * M) for s in senders}}
    demands = [Demand(s, "h9", (f"up-{s}", "down")) for s in senders]
    rates = advise(demands, links)
    assert all(r == pytest.approx(20 * M * 0.95 / 6) for r in rates.values())
    weighted = [Demand(s, "h9", (f"up-{s}", "down"), weight=2.0 if s == "h0" else 1.0) for s in senders]
    rates = advise(weighted, links, NO_HEADROOM)
    assert rates[("h0", "h9")] == pytest.approx(2 * rates[("h1", "h9")])
    assert sum(rates.values()) == pytest.approx(20 * M)


def test_caps_free_capacity_for_the_others():
    demands = [Demand("a", "x", ("L",), cap_bps=2 * M), Demand("b", "x", ("L",)), Demand("c", "x", ("L",))]
    assert water_fill(demands, {"L": 20 * M}) == pytest.approx([2 * M, 9 * M, 9 * M])


def test_flows_joining_and_leaving_change_only_what_they_touch():
    links = {"L": LinkState(30 * M), "K": LinkState(30 * M)}
    first = advise([Demand("a", "x", ("L",)), Demand("b", "y", ("K",))], links, NO_HEADROOM)
    joined = advise([Demand("a", "x", ("L",)), Demand("b", "y", ("K",)), Demand("c", "x", ("L",))], links,
                    NO_HEADROOM)
    assert joined[("a", "x")] == pytest.approx(15 * M) and joined[("c", "x")] == pytest.approx(15 * M)
    assert changed(joined, first) == {("a", "x"): joined[("a", "x")], ("c", "x"): joined[("c", "x")]}
    left = advise([Demand("a", "x", ("L",)), Demand("b", "y", ("K",))], links, NO_HEADROOM)
    assert changed(left, joined) == {("a", "x"): pytest.approx(30 * M)}


def test_a_standing_queue_lowers_the_offer_so_it_drains():
    params = AdvisorParams(eta=0.95, drain_s=0.010, mtu_bytes=1500, drain_frames=0)
    quiet = advise([Demand("a", "x", ("L",))], {"L": LinkState(20 * M)}, params)
    queued = advise([Demand("a", "x", ("L",))], {"L": LinkState(20 * M, queue_pkts=5)}, params)
    # 5 × 1500 B over 10 ms = 6 Mbit/s less.
    assert quiet[("a", "x")] - queued[("a", "x")] == pytest.approx(6 * M)
    flooded = advise([Demand("a", "x", ("L",))], {"L": LinkState(20 * M, queue_pkts=64)}, params)
    assert flooded[("a", "x")] == pytest.approx(2 * M)  # floor: 10 % of capacity


def test_a_slow_link_drains_over_its_own_frame_times():
    # 1 Mbit/s: a 1500 B frame is 12 ms on the wire; 8 standing frames over 100 ms would be the whole link.
    params = AdvisorParams(eta=0.95, eta_alone=0.95, drain_s=0.100, mtu_bytes=1500, drain_frames=64)
    queued = advise([Demand("a", "x", ("L",))], {"L": LinkState(1 * M, queue_pkts=8)}, params)
    assert queued[("a", "x")] == pytest.approx(0.95 * M - 8 * M / 64)  # each frame costs capacity / 64
    # at 20 Mbit/s the 100 ms horizon is the longer (64 frames: 38 ms): 8 × 1500 B over 100 ms
    fast = advise([Demand("a", "x", ("L",))], {"L": LinkState(20 * M, queue_pkts=8)}, params)
    assert fast[("a", "x")] == pytest.approx(19 * M - 0.96 * M)


def test_a_link_one_demand_crosses_is_offered_at_eta_alone_a_shared_one_at_eta():
    params = AdvisorParams(eta=0.95, eta_alone=0.99)
    links = {"nic-a": LinkState(20 * M), "nic-b": LinkState(20 * M), "down": LinkState(20 * M),
             "other": LinkState(20 * M)}
    alone = advise([Demand("a", "x", ("nic-a", "other"))], links, params)
    assert alone[("a", "x")] == pytest.approx(19.8 * M)
    shared = advise([Demand("a", "x", ("nic-a", "down")), Demand("b", "x", ("nic-b", "down"))], links, params)
    assert shared == {("a", "x"): pytest.approx(9.5 * M), ("b", "x"): pytest.approx(9.5 * M)}


def test_bad_input_is_named():
    with pytest.raises(KeyError, match="unknown link 'Z'"):
        water_fill([Demand("a", "x", ("Z",))], {"L": M})
    with pytest.raises(ValueError, match="weight must be > 0"):
        water_fill([Demand("a", "x", ("L",), weight=0)], {"L": M})


def test_jain_index():
    assert jain_index([3, 3, 3]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
