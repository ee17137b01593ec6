"""The CPU budget: frame-hops of an experiment's flows against the machine's cores."""

from __future__ import annotations

import pytest

from emulation import budget
from topologies import leafspine


def test_a_frame_crosses_one_switch_within_a_leaf_and_three_across_the_spines():
    topo = leafspine()
    assert budget.path_switches(topo, "h1", "h2") == 1
    assert budget.path_switches(topo, "h1", "h5") == 3


def test_the_ring_costs_what_its_hops_carry_and_scales_with_the_link_rate():
    hosts = [f"h{i}" for i in range(1, 9)]
    at20 = budget.ring(leafspine(), hosts, cores=2)
    # 8 flows at 20 Mbit/s: 6 within a leaf (1 switch), 2 across (3 switches) = 12 frame-hops per round
    per_flow = 20e6 / 8 / budget.FRAME_BYTES * (1 + budget.ACK_FRAMES_PER_DATA)
    assert at20.frames_per_s == pytest.approx(12 * per_flow)
    at40 = budget.ring(leafspine(capacity_mbps=40), hosts, cores=2)
    assert at40.frame_cores == pytest.approx(2 * at20.frame_cores)
    assert at40.idle_cores == at20.idle_cores == 4 * budget.IDLE_SWITCH_CORES
    assert at40.other_cores == at20.other_cores


def test_an_experiment_over_budget_says_so_and_offers_a_rate_that_fits():
    hosts = [f"h{i}" for i in range(1, 9)]
    over = budget.ring(leafspine(capacity_mbps=80), hosts, cores=2)
    assert over.over
    assert "OVER" in over.line() and f"--link-mbps {over.fits_mbps:g}" in over.line()
    fitted = budget.ring(leafspine(capacity_mbps=over.fits_mbps), hosts, cores=2)
    assert not fitted.over, fitted.line()
    roomy = budget.ring(leafspine(capacity_mbps=80), hosts, cores=64)
    assert not roomy.over and "OVER" not in roomy.line()


def test_an_incast_is_held_to_the_receivers_link():
    topo = leafspine()
    one = budget.estimate(topo, [("h2", "h1")], "one flow", cores=2)
    six = budget.estimate(topo, [(f"h{i}", "h1") for i in (2, 3, 4, 5, 6, 7)], "incast", cores=2)
    # six senders share h1's 20 Mbit/s: three within the leaf (1 switch), three across (3 switches)
    assert six.frames_per_s == pytest.approx(one.frames_per_s / 6 * (3 * 1 + 3 * 3))


def test_full_load_is_above_the_ring_on_the_same_fabric():
    topo = leafspine()
    assert budget.full_load(topo, cores=2).needed > budget.ring(topo, [f"h{i}" for i in range(1, 9)], cores=2).needed
