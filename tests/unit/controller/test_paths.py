"""Path scheduling (controller/paths.py): candidates from the routes, placement, moves, pins."""

from __future__ import annotations

import random
import statistics

from controller.paths import PathScheduler, max_min_rates
from controller.routing import compute_routes
from topologies import fattree, leafspine
from topologies.addressing import AddressPlan
from topologies.spec import nic_link
from wire.p4info import P4Schema
from wire.proto import p4r

SCHEMA = P4Schema.load()


def scheduler(topo) -> PathScheduler:
    plan = AddressPlan(topo)
    s = PathScheduler(topo, plan, topo.link_capacities_bps())
    s.set_routes(compute_routes(topo, plan))
    return s


def ip(s: PathScheduler, host: str) -> str:
    return s.plan.hosts[host].ip


def test_max_min_rates_share_a_bottleneck_and_give_the_rest_to_others():
    cap = {"a": 10.0, "b": 10.0}
    rates = max_min_rates({1: ("a",), 2: ("a", "b"), 3: ("b",)}, cap)  # type: ignore[dict-item]
    assert rates == {1: 5.0, 2: 5.0, 3: 5.0}
    rates = max_min_rates({1: ("a",), 2: ("a", "b")}, {"a": 10.0, "b": 4.0})  # type: ignore[dict-item]
    assert rates == {1: 6.0, 2: 4.0}


def test_candidates_are_every_shortest_path_with_the_forks_to_pin():
    s = scheduler(leafspine())  # 2 spines, leaves s3 (h1-h4) and s4 (h5-h8)
    across = s.candidates(ip(s, "h1"), ip(s, "h5"))
    assert len(across) == 2
    assert {p.links[1][0] for p in across} == {"s3"} and {p.links[2][0] for p in across} == {"s1", "s2"}
    assert all(len(p.forks) == 1 and p.forks[0][0] == "s3" for p in across)  # only the leaf forks
    (within,) = s.candidates(ip(s, "h1"), ip(s, "h2"))
    assert within.forks == () and within.links[0] == nic_link("h1")
    f = scheduler(fattree(4))
    assert len(f.candidates(ip(f, "h1"), ip(f, "h5"))) == 4  # another pod: by each of the 4 cores
    assert len(f.candidates(ip(f, "h1"), ip(f, "h3"))) == 2  # the same pod, another edge: by each agg


def test_two_flows_that_ecmp_could_collide_go_on_different_uplinks():
    s = scheduler(leafspine())
    flows = [(ip(s, "h1"), ip(s, "h5"), 6, 40000, 5201), (ip(s, "h2"), ip(s, "h6"), 6, 40001, 5201)]
    placed = s.schedule(flows, now=0.0)
    assert placed[flows[0]].links[2] != placed[flows[1]].links[2]
    assert min(max_min_rates({f: p.links for f, p in placed.items()}, s.capacity).values()) == 20e6


def ecmp_share(s: PathScheduler, flows, rng: random.Random) -> float:
    paths = {f: rng.choice(s.candidates(f[0], f[1])).links for f in flows}
    return sum(max_min_rates(paths, s.capacity).values()) / (len(flows) * 20e6)


def permutation(s: PathScheduler, rng: random.Random) -> list:
    """One flow from every host to a random other host, every host receiving one (Hedera's random)."""
    hosts = sorted(s.plan.hosts)
    while True:
        dsts = hosts[:]
        rng.shuffle(dsts)
        if all(a != b for a, b in zip(hosts, dsts, strict=True)):
            break
    return [(ip(s, a), ip(s, b), 6, 40000 + i, 5201) for i, (a, b) in enumerate(zip(hosts, dsts, strict=True))]


def test_random_permutations_on_a_fat_tree_get_near_the_non_blocking_ideal():
    """Hedera's random-permutation pattern on k=4, 10 seeds: the placement's aggregate max-min
    throughput against the non-blocking ideal (every host at its NIC rate), and against ECMP."""
    shares, ecmp = [], []
    for seed in range(10):
        s = scheduler(fattree(4))
        rng = random.Random(seed)
        flows = permutation(s, rng)
        placed = s.schedule(flows, now=0.0)
        rates = max_min_rates({f: p.links for f, p in placed.items()}, s.capacity)
        shares.append(sum(rates.values()) / (len(flows) * 20e6))
        ecmp.append(ecmp_share(s, flows, rng))
    assert statistics.median(shares) >= 0.9, shares
    assert statistics.median(shares) >= 1.15 * statistics.median(ecmp), (shares, ecmp)


def permutation_flows(s: PathScheduler, seed: int) -> list:
    rng = random.Random(seed)
    flows = permutation(s, rng)
    rng.shuffle(flows)  # the order INT shows them in
    return flows


def test_flows_that_arrive_one_by_one_settle_at_the_nonblocking_ideal_within_seconds():
    """As on the testbed: each flow placed when INT first shows it, then the rounds of moves. Where
    no chain of three moves frees the last shared link, the annealing finds the placement."""
    settled = []
    for seed in range(10):
        s = scheduler(fattree(4))
        flows = permutation_flows(s, seed)
        now = 0.0
        for i in range(len(flows)):
            s.schedule(flows[:i + 1], now)
            now += 0.02
        for _ in range(30):  # 3 s of rounds
            now += 0.1
            s.schedule(flows, now)
        rates = max_min_rates({f: p.links for f, p in s.placed.items()}, s.capacity)
        settled.append(min(rates.values()) / 20e6)
    assert settled == [1.0] * 10, settled


def test_a_placed_flow_moves_only_when_it_pays_and_not_again_at_once():
    s = scheduler(leafspine())
    a = (ip(s, "h1"), ip(s, "h5"), 6, 40000, 5201)
    b = (ip(s, "h2"), ip(s, "h6"), 6, 40001, 5201)
    s.schedule([a], now=0.0)
    uplink_a = s.placed[a].links[2]
    # b arrives on a's uplink (as ECMP might have put it, before the scheduler saw it)
    s.placed[b] = next(p for p in s.candidates(b[0], b[1]) if p.links[2] == uplink_a)
    s.schedule([a, b], now=1.0)
    assert s.placed[a].links[2] != s.placed[b].links[2] and s.moves == 1
    moved = next(f for f in (a, b) if s.moved_at.get(f) == 1.0)
    other = b if moved == a else a
    s.placed[other] = next(p for p in s.candidates(other[0], other[1]) if p.links[2] == s.placed[moved].links[2])
    s.schedule([a, b], now=1.2)  # collide again: the flow moved 0.2 s ago stays, the other one moves
    assert s.placed[a].links[2] != s.placed[b].links[2] and s.moved_at[other] == 1.2


def test_pins_follow_the_placement_and_go_when_flows_end():
    s = scheduler(leafspine())
    a = (ip(s, "h1"), ip(s, "h5"), 6, 40000, 5201)
    s.schedule([a], now=0.0)
    first = s.pin_updates(lambda _: SCHEMA)
    assert list(first) == ["s3"] and [u.type for u in first["s3"]] == [p4r.Update.INSERT]
    assert s.pin_updates(lambda _: SCHEMA) == {}  # nothing changed, nothing written
    assert len(s.restore(SCHEMA, "s3")) == 1
    s.schedule([], now=1.0)
    gone = s.pin_updates(lambda _: SCHEMA)
    assert [u.type for u in gone["s3"]] == [p4r.Update.DELETE] and s.pinned == {}


def test_a_failed_link_moves_the_flows_pinned_over_it():
    topo = leafspine()
    s = scheduler(topo)
    flows = [(ip(s, f"h{i}"), ip(s, f"h{i + 4}"), 6, 40000 + i, 5201) for i in range(1, 5)]
    s.schedule(flows, now=0.0)
    s.pin_updates(lambda _: SCHEMA)
    down = frozenset(("s3", "s1"))
    s.set_routes(compute_routes(topo, s.plan, {down}))
    placed = s.schedule(flows, now=0.05)
    dead = topo.find_link("s3", "s1").port_of("s3")
    assert all(("s3", dead) not in p.links for p in placed.values())
    updates = s.pin_updates(lambda _: SCHEMA)
    # s3 has one uplink left: no fork there any more, so its pins go (ECMP has one choice)
    assert all(u.type == p4r.Update.DELETE for u in updates.get("s3", []))
    assert all(hop.port != dead for hop in s.pinned.get("s3", {}).values())


def test_annealing_leaves_a_link_that_only_held_flows_overfill():
    s = scheduler(leafspine())
    held = [(ip(s, h), ip(s, d), 6, 40000 + i, 5201) for i, (h, d) in enumerate([("h1", "h5"), ("h2", "h6")])]
    free = (ip(s, "h3"), ip(s, "h7"), 6, 40002, 5201)
    uplink = s.candidates(held[0][0], held[0][1])[0].links[2]
    for f in [*held, free]:
        s.placed[f] = next(p for p in s.candidates(f[0], f[1]) if p.links[2] == uplink)
    moves = s._anneal([free])  # the held flows keep the uplink overfull once the free one has left it
    assert moves is not None and moves[free].links[2] != uplink
