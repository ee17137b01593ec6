"""The array water-filling and the incremental advisor against a plain reference: random fabrics and
random sequences of demands joining and leaving and capacities changing (seeded)."""

from __future__ import annotations

import random

import pytest

from controller.advisor import Demand, IncrementalFill, water_fill

M = 1e6


def reference_fill(demands: list[Demand], capacity: dict) -> list[float]:
    """Progressive filling written the plain way (one demand, one link at a time)."""
    rates = [0.0] * len(demands)
    frozen = [d.cap_bps is not None and d.cap_bps <= 0 for d in demands]
    residual = dict(capacity)
    while not all(frozen):
        level = min([residual[link] / sum(d.weight for j, d in enumerate(demands) if not frozen[j] and link in d.links)
                     for link in capacity
                     if any(not frozen[j] and link in d.links for j, d in enumerate(demands))]
                    + [(d.cap_bps - rates[i]) / d.weight for i, d in enumerate(demands)
                       if not frozen[i] and d.cap_bps is not None])
        for i, d in enumerate(demands):
            if not frozen[i]:
                rates[i] += level * d.weight
                for link in d.links:
                    residual[link] -= level * d.weight
        for i, d in enumerate(demands):
            full = any(residual[link] <= 1e-9 * capacity[link] for link in d.links)
            if not frozen[i] and (full or (d.cap_bps is not None and rates[i] >= d.cap_bps * (1 - 1e-9))):
                frozen[i] = True
    return rates


def fabric(rng: random.Random) -> tuple[list[str], dict[str, float], callable]:
    """A small leaf-spine: hosts with NIC and downlink links, leaf uplinks to spines, mixed capacities."""
    leaves, spines, per_leaf = rng.randint(2, 4), rng.randint(1, 3), rng.randint(1, 3)
    hosts = [f"h{leaf}.{i}" for leaf in range(leaves) for i in range(per_leaf)]
    capacity = {}
    for h in hosts:
        capacity[("up", h)] = rng.choice([10, 20, 40]) * M
        capacity[("down", h)] = rng.choice([10, 20, 40]) * M
    for leaf in range(leaves):
        for spine in range(spines):
            capacity[("l2s", leaf, spine)] = rng.choice([5, 10, 20]) * M
            capacity[("s2l", spine, leaf)] = rng.choice([5, 10, 20]) * M

    def path(src: str, dst: str) -> tuple:
        a, b = int(src[1:].split(".")[0]), int(dst[1:].split(".")[0])
        if a == b:
            return (("up", src), ("down", dst))
        spine = rng.randrange(spines)
        return (("up", src), ("l2s", a, spine), ("s2l", spine, b), ("down", dst))

    return hosts, capacity, path


def random_demand(rng: random.Random, hosts: list[str], path) -> Demand:
    src, dst = rng.sample(hosts, 2)
    cap = rng.choice([None, None, None, rng.uniform(0.5, 8) * M])
    return Demand(src, dst, path(src, dst), weight=rng.choice([1.0, 1.0, 2.0, 0.5]), cap_bps=cap)


@pytest.mark.parametrize("seed", range(12))
def test_array_water_filling_equals_the_reference(seed):
    rng = random.Random(seed)
    hosts, capacity, path = fabric(rng)
    demands = [random_demand(rng, hosts, path) for _ in range(rng.randint(1, 25))]
    assert water_fill(demands, capacity) == pytest.approx(reference_fill(demands, capacity), rel=1e-7, abs=1e-3)


@pytest.mark.parametrize("seed", range(25))
def test_incremental_rates_equal_a_full_recompute_after_every_change(seed):
    rng = random.Random(1000 + seed)
    hosts, capacity, path = fabric(rng)
    fair = IncrementalFill(capacity)
    live: dict[int, Demand] = {}
    for step in range(60):
        op = rng.random()
        if op < 0.55 or not live:
            key = step
            live[key] = random_demand(rng, hosts, path)
            changed = fair.join(key, live[key])
        elif op < 0.9:
            key = rng.choice(sorted(live))
            del live[key]
            changed = fair.leave(key)
        else:
            link = rng.choice(sorted(capacity, key=repr))
            capacity[link] = rng.choice([5, 10, 20, 40]) * M
            changed = fair.set_capacity(link, capacity[link])
        keys = sorted(live)
        expected = dict(zip(keys, water_fill([live[k] for k in keys], capacity), strict=True))
        got = fair.rates()
        assert got.keys() == expected.keys()
        for key in keys:
            assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1.0), (seed, step, key)
        assert set(changed) <= set(live)


def test_a_join_reports_the_rates_it_changed_and_touches_only_its_neighbours():
    capacity = {"A": 10 * M, "B": 10 * M, "C": 10 * M}
    fair = IncrementalFill(capacity)
    assert fair.join("x", Demand("h1", "h2", ("A",))) == {"x": pytest.approx(10 * M)}
    assert fair.join("far", Demand("h3", "h4", ("C",))) == {"far": pytest.approx(10 * M)}
    changed = fair.join("y", Demand("h5", "h2", ("A", "B")))
    assert changed == {"x": pytest.approx(5 * M), "y": pytest.approx(5 * M)}
    assert fair.refilled == 2  # "far" shares no link: not re-filled
    assert fair.leave("x") == {"y": pytest.approx(10 * M)}
    with pytest.raises(KeyError, match="unknown link"):
        fair.join("z", Demand("h1", "h2", ("Q",)))
    with pytest.raises(ValueError, match="weight"):
        fair.join("w", Demand("h1", "h2", ("A",), weight=0))
