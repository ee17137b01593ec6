"""Placing a fabric on several machines (emulation/placement.py): groups stay whole, the load is spread,
only switch-to-switch links cross, and a switch no single process can keep up with is said."""

from __future__ import annotations

from emulation import budget
from emulation.placement import SWITCH_CORE_LIMIT, groups, machines_needed, place
from topologies import fattree, leafspine, railopt


def test_a_leaf_keeps_its_hosts_and_a_server_its_gpus() -> None:
    assert sorted(map(sorted, groups(leafspine()))) == sorted(
        [["s1"], ["s2"], ["h1", "h2", "h3", "h4", "s3"], ["h5", "h6", "h7", "h8", "s4"]])
    rail = railopt(servers=2, gpus=2, spines=1)
    assert ["h1", "h2"] in groups(rail) and ["h3", "h4"] in groups(rail)
    assert all(g == [g[0]] for g in groups(rail) if g[0].startswith("s"))  # rails' leaves alone: GPUs are in servers


def test_two_machines_split_the_default_fabric_across_leaf_spine_links_only() -> None:
    topo = leafspine()
    hosts = [h.name for h in topo.hosts]
    p = place(topo, ["a", "b"], budget.ring_flows(hosts))
    assert p.machine_of["h1"] == p.machine_of["s3"] != p.machine_of["s4"] == p.machine_of["h5"]
    assert all(topo.is_switch(a) and topo.is_switch(b) for a, b in p.crossing) and p.crossing
    total = sum(p.switch_cores.values()) + budget.HOST_CORES * 8 + budget.CONTROLLER_CORES
    assert abs(sum(p.cores.values()) - total) < 1e-9
    assert p.busiest < 0.75 * total  # spread, not piled on one
    assert set(p.tunnel_mbps) == {"a", "b"}


def test_the_fewest_machines_fit_and_a_switch_beyond_one_process_cannot_be_placed() -> None:
    topo = fattree(4)
    hosts = [h.name for h in topo.hosts]
    flows = budget.ring_flows(hosts)
    two = machines_needed(topo, flows, cores_per_machine=2)
    assert two is not None and two.busiest <= 2 and len(two.machines) >= 1
    if len(two.machines) > 1:
        fewer = place(topo, two.machines[:-1], flows)
        assert fewer.busiest > 2  # one machine less would not fit
    fast = fattree(4, capacity_mbps=10_000)  # 10 Gbit/s links: a switch needs far more than a process
    assert machines_needed(fast, budget.ring_flows([h.name for h in fast.hosts]), cores_per_machine=64) is None
    assert max(place(fast, ["m1"], budget.ring_flows([h.name for h in fast.hosts])).switch_cores.values()) \
        > SWITCH_CORE_LIMIT
