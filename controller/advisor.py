"""The rate advisor (the TiTa analogue): weighted max-min fair rates for host demands over their paths.

Pure functions. Inputs: demands (source host, destination IP, the links of the path they really
take, a weight, an optional cap) and per-link capacity and measured queue. Each link offers
capacity × η minus an HPCC-style drain term — the bits standing in its queue spread over the drain
horizon, so a measured queue empties within one interval — never less than `min_share` of its
capacity. The horizon is never shorter than `drain_frames` of the link's own frame times: at 1 Mbit/s
a frame takes 12 ms on the wire, and 100 ms to drain 8 of them would ask for the whole link (the
offer fell to its floor and stayed there), while at 10 Mbit/s and more the fixed horizon is the longer.
Water-filling then raises every unfrozen demand's rate by weight × level until a link is full or a
demand reaches its cap; those demands freeze and the rest go on.

    links: {link id: LinkState(capacity_bps, queue_pkts)}  (any hashable id; the controller uses topologies.spec.LinkId)
    demands: [Demand(src, dst, links=(link ids…), weight, cap_bps)]
    advise(demands, links, params) → {(src, dst): rate_bps}
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

EPS = 1e-9


@dataclass(frozen=True)
class AdvisorParams:
    """eta: target utilisation; drain_s: horizon in which a standing queue should empty (seconds) —
    a few times the loop's reaction time (advice → paced hosts → INT report), or it oscillates;
    mtu_bytes: bytes per queued packet; min_share: floor of a link's offered capacity (fraction);
    queue_allowance_pkts: standing queue not worth draining (the jitter of uncoordinated senders);
    drain_frames: the horizon is at least this many of the link's frame times (mtu_bytes at its
    capacity) — each standing frame then costs at most capacity / drain_frames (0: no such bound);
    eta_alone: target utilisation of a link only one demand crosses — η's headroom is for several
    uncoordinated paced senders meeting at one queue; one sender alone builds none faster than its
    pacer errs (and the drain term answers a standing queue as on any link). At η a job alone on
    its paths ran at 0.95 of what it had without advice. (A demand this offers eta_alone of its NIC
    is advised its line rate by the advice loop: its NIC is its bottleneck, and it is not paced.)"""

    eta: float = 0.95
    eta_alone: float = 0.99
    drain_s: float = 0.100
    mtu_bytes: int = 1514
    min_share: float = 0.10
    queue_allowance_pkts: float = 0.0  # a standing queue up to this is left alone
    drain_frames: float = 64.0


@dataclass(frozen=True)
class LinkState:
    capacity_bps: float
    queue_pkts: float = 0.0


@dataclass(frozen=True)
class Demand:
    """One source host's traffic to one destination: weight = its share (e.g. its number of flows),
    cap_bps = the most it wants (None: as much as it can get)."""

    src: str
    dst: str
    links: tuple[Hashable, ...]
    weight: float = 1.0
    cap_bps: float | None = None


def offered_capacity(link: LinkState, params: AdvisorParams) -> float:
    """capacity × η minus the drain term, floored at min_share × capacity."""
    return float(offered_capacities(np.array([link.capacity_bps]), np.array([link.queue_pkts]), params)[0])


def offered_capacities(capacity_bps: np.ndarray, queue_pkts: np.ndarray, params: AdvisorParams,
                       crossings: np.ndarray | None = None) -> np.ndarray:
    """offered_capacity over arrays of links; crossings: how many demands cross each (None: many),
    a link with one offered at eta_alone."""
    standing = np.maximum(0.0, queue_pkts - params.queue_allowance_pkts)
    frame_bits = params.mtu_bytes * 8
    horizon_s = np.maximum(params.drain_s, params.drain_frames * frame_bits / np.maximum(capacity_bps, EPS))
    drain_bps = standing * frame_bits / horizon_s if params.drain_s > 0 else np.zeros_like(standing)
    eta = params.eta if crossings is None else np.where(crossings == 1, max(params.eta, params.eta_alone), params.eta)
    return np.maximum(capacity_bps * eta - drain_bps, capacity_bps * params.min_share)


class Incidence:
    """Demands and links as arrays: which demand crosses which link (one entry per crossing), each
    demand's weight and cap (inf: none), each link's capacity, in the order of `link_ids`."""

    def __init__(self, demands: Sequence[Demand], link_ids: Sequence[Hashable], capacity: np.ndarray) -> None:
        self.link_ids = link_ids
        index = {link: i for i, link in enumerate(link_ids)}
        self.capacity = capacity
        n = len(demands)
        self.weight = np.fromiter((d.weight for d in demands), dtype=float, count=n)
        self.cap = np.fromiter((math.inf if d.cap_bps is None else d.cap_bps for d in demands), dtype=float, count=n)
        bad = np.flatnonzero(~(self.weight > 0))
        if bad.size:
            d = demands[int(bad[0])]
            raise ValueError(f"demand {d.src}->{d.dst}: weight must be > 0, got {d.weight}")
        counts = np.fromiter((len(d.links) for d in demands), dtype=np.int64, count=n)
        self.demand_of = np.repeat(np.arange(n), counts)
        try:
            self.link_of = np.fromiter((index[link] for d in demands for link in d.links), dtype=np.int64,
                                       count=int(counts.sum()))
        except KeyError as exc:
            d = next(d for d in demands if any(link not in index for link in d.links))
            raise KeyError(f"demand {d.src}->{d.dst}: unknown link {exc.args[0]!r}") from None


def water_fill(demands: Sequence[Demand], capacity: Mapping[Any, float]) -> list[float]:
    """Weighted max-min fair rates (bit/s), one per demand, for links of the given capacity."""
    return [float(r) for r in fill(incidence(demands, capacity))]


def incidence(demands: Sequence[Demand], capacity: Mapping[Any, float]) -> Incidence:
    return Incidence(demands, list(capacity), np.fromiter(capacity.values(), dtype=float, count=len(capacity)))


def fill(inc: Incidence) -> np.ndarray:
    """Weighted max-min fair rates over arrays, by bottleneck links found many at a time.

    A link's share is its residual capacity over the weight of its unfrozen demands; a demand's
    level is the lowest share on its path, or its cap per weight. A link whose share is no higher
    than the level of any demand crossing it is a bottleneck: filling would freeze its demands at
    exactly that share, because shares only grow when demands elsewhere freeze below them. So every
    such link (and every demand whose cap is its level) freezes in one pass — the global minimum is
    always among them — and each pass works on the crossings of unfrozen demands only."""
    n_links, n = len(inc.link_ids), len(inc.weight)
    rates = np.zeros(n)
    active = ~(inc.cap <= 0)
    residual = inc.capacity.copy()
    cap_level = inc.cap / inc.weight
    keep = active[inc.demand_of]
    demand_of, link_of = inc.demand_of[keep], inc.link_of[keep]  # sorted by demand, as built
    while active.any():
        load = np.bincount(link_of, weights=inc.weight[demand_of], minlength=n_links)
        share = np.full(n_links, math.inf)
        used = load > 0
        share[used] = np.maximum(residual[used], 0.0) / load[used]
        level = cap_level.copy()
        if demand_of.size:
            starts = np.flatnonzero(np.r_[True, demand_of[1:] != demand_of[:-1]])
            level[demand_of[starts]] = np.minimum(level[demand_of[starts]],
                                                  np.minimum.reduceat(share[link_of], starts))
        level[~active] = math.inf
        if np.isinf(level[active]).any():  # a demand that crosses no link and has no cap
            raise ValueError("a demand crosses no link and has no cap: its rate is unbounded")
        lowest = np.full(n_links, math.inf)
        np.minimum.at(lowest, link_of, level[demand_of])
        bottleneck = used & (share <= lowest * (1 + EPS))
        frozen = active & (cap_level <= level * (1 + EPS))
        frozen[demand_of[bottleneck[link_of]]] = True
        rates[frozen] = level[frozen] * inc.weight[frozen]
        entering = frozen[demand_of]
        residual -= np.bincount(link_of[entering], weights=rates[demand_of[entering]], minlength=n_links)
        active &= ~frozen
        keep = ~entering
        demand_of, link_of = demand_of[keep], link_of[keep]
    return rates


class IncrementalFill:
    """Weighted max-min fair rates kept up to date as demands join and leave and capacities change,
    touching only the demands whose rates can move.

    A change re-fills a set S of demands (at first those sharing a link with the change) over the
    capacity the others leave, then checks every demand on S's links for a bottleneck: a full link
    where its rate per weight is the highest, or its cap. Demands without one join S, with the
    demands sharing their links, and S is re-filled; the allocation in which every demand has a
    bottleneck is the unique max-min fair one, so the result equals a full recompute (`fill`).

        fair = IncrementalFill({"L1": 10e6, "L2": 5e6})
        fair.join("a", Demand("h1", "h2", ("L1",)))   # → {"a": 10e6}: the rates that changed
        fair.leave("a")
    """

    TOLERANCE = 1e-7  # relative: loads are sums updated in place

    def __init__(self, capacity: Mapping[Any, float]) -> None:
        self.capacity = dict(capacity)
        self.demands: dict[Hashable, Demand] = {}
        self.rate: dict[Hashable, float] = {}
        self.load: dict[Hashable, float] = {link: 0.0 for link in self.capacity}
        self.users: dict[Hashable, set[Hashable]] = {link: set() for link in self.capacity}
        self.refilled = 0  # demands re-filled by the last change (its cost)

    def rates(self) -> dict[Hashable, float]:
        return dict(self.rate)

    def reset(self, demands: Mapping[Hashable, Demand]) -> None:
        """Start over with these demands, every rate from scratch (bad weights and unknown links are
        refused before anything changes)."""
        keys = list(demands)
        rates = fill(incidence([demands[k] for k in keys], self.capacity)) if keys else np.zeros(0)
        self.demands = dict(demands)
        self.rate = {k: float(r) for k, r in zip(keys, rates, strict=True)}
        self.users = {link: set() for link in self.capacity}
        self.load = {link: 0.0 for link in self.capacity}
        for key, demand in self.demands.items():
            for link in demand.links:
                self.users[link].add(key)
                self.load[link] += self.rate[key]

    def recompute(self) -> None:
        """Every rate from scratch (array water-filling)."""
        self.reset(self.demands)

    def join(self, key: Hashable, demand: Demand) -> dict[Hashable, float]:
        if key in self.demands:
            raise KeyError(f"demand {key!r} is already in")
        if demand.weight <= 0:
            raise ValueError(f"demand {demand.src}->{demand.dst}: weight must be > 0, got {demand.weight}")
        unknown = [link for link in demand.links if link not in self.capacity]
        if unknown:
            raise KeyError(f"demand {demand.src}->{demand.dst}: unknown link {unknown[0]!r}")
        if not demand.links and demand.cap_bps is None:
            raise ValueError("a demand crosses no link and has no cap: its rate is unbounded")
        self.demands[key] = demand
        self.rate[key] = 0.0
        for link in demand.links:
            self.users[link].add(key)
        return self._refill(self._sharing([key]))

    def leave(self, key: Hashable) -> dict[Hashable, float]:
        seeds = self._sharing([key]) - {key}
        demand = self.demands.pop(key)
        for link in demand.links:
            self.users[link].discard(key)
            self.load[link] -= self.rate[key]
        del self.rate[key]
        return self._refill(seeds)

    def set_capacity(self, link: Hashable, capacity_bps: float) -> dict[Hashable, float]:
        self.capacity[link] = capacity_bps
        return self._refill(set(self.users[link]))

    def _sharing(self, keys: Sequence[Hashable]) -> set[Hashable]:
        out = set(keys)
        for key in keys:
            for link in self.demands[key].links:
                out |= self.users[link]
        return out

    def _refill(self, group: set[Hashable]) -> dict[Hashable, float]:
        before = {key: self.rate[key] for key in group}
        while group:
            keys = sorted(group, key=repr)
            links = {link for key in keys for link in self.demands[key].links}
            residual = {link: max(0.0, self.capacity[link] - self.load[link]
                                  + sum(self.rate[k] for k in self.users[link] & group)) for link in links}
            rates = fill(incidence([self.demands[k] for k in keys], residual))
            for key, rate in zip(keys, rates, strict=True):
                for link in self.demands[key].links:
                    self.load[link] += float(rate) - self.rate[key]
                self.rate[key] = float(rate)
            checked = set().union(*(self.users[link] for link in links))
            stuck = {key for key in checked if not self._has_bottleneck(key)}
            if not stuck:
                break
            for key in stuck - group:
                before.setdefault(key, self.rate[key])
            grown = group | self._sharing(sorted(stuck, key=repr))
            for key in grown - group:
                before.setdefault(key, self.rate[key])
            group = grown
        self.refilled = len(before)
        return {key: self.rate[key] for key, old in before.items()
                if key in self.rate and abs(self.rate[key] - old) > self.TOLERANCE * max(old, 1.0)}

    def _has_bottleneck(self, key: Hashable) -> bool:
        demand = self.demands[key]
        rate = self.rate[key]
        if demand.cap_bps is not None and rate >= demand.cap_bps * (1 - self.TOLERANCE):
            return True
        level = rate / demand.weight
        for link in demand.links:
            if self.load[link] < self.capacity[link] * (1 - self.TOLERANCE):
                continue
            top = max(self.rate[k] / self.demands[k].weight for k in self.users[link])
            if level >= top * (1 - self.TOLERANCE):
                return True
        return False


def advise(demands: Sequence[Demand], links: Mapping[Any, LinkState],
           params: AdvisorParams | None = None) -> dict[tuple[str, str], float]:
    """Advised rate (bit/s) per (source host, destination): the sum of its demands' fair rates."""
    params = params or AdvisorParams()
    states = list(links.values())
    capacity_bps = np.fromiter((s.capacity_bps for s in states), dtype=float, count=len(states))
    queue_pkts = np.fromiter((s.queue_pkts for s in states), dtype=float, count=len(states))
    inc = Incidence(demands, list(links), capacity_bps)
    inc.capacity = offered_capacities(capacity_bps, queue_pkts, params,
                                      np.bincount(inc.link_of, minlength=len(states)))
    rates = fill(inc)
    out: dict[tuple[str, str], float] = defaultdict(float)
    for demand, rate in zip(demands, rates, strict=True):
        out[(demand.src, demand.dst)] += rate
    return dict(out)


def changed(new: dict[tuple[str, str], float], sent: dict[tuple[str, str], float],
            tolerance: float = 0.01) -> dict[tuple[str, str], float]:
    """The advice worth sending: new keys, and rates that moved by more than `tolerance` (relative)."""
    return {key: rate for key, rate in new.items()
            if key not in sent or abs(rate - sent[key]) > tolerance * max(sent[key], 1.0)}

