"""The rate advisor (the TiTa analogue): weighted max-min fair rates for host demands over their paths.

Pure functions. Inputs: demands (source host, destination IP, the links of the path they really
take, a weight, an optional cap) and per-link capacity and measured queue. Each link offers
capacity × η minus an HPCC-style drain term — the bits standing in its queue spread over the drain
horizon, so a measured queue empties within one interval — never less than `min_share` of its
capacity. Water-filling then raises every unfrozen demand's rate by weight × level until a link is
full or a demand reaches its cap; those demands freeze and the rest go on.

    links: {link id: LinkState(capacity_bps, queue_pkts)}  (any hashable id; the controller uses topologies.spec.LinkId)
    demands: [Demand(src, dst, links=(link ids…), weight, cap_bps)]
    advise(demands, links, params) → {(src, dst): rate_bps}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EPS = 1e-9


@dataclass(frozen=True)
class AdvisorParams:
    """eta: target utilisation; drain_s: horizon in which a standing queue should empty (seconds) —
    a few times the loop's reaction time (advice → paced hosts → INT report), or it oscillates;
    mtu_bytes: bytes per queued packet; min_share: floor of a link's offered capacity (fraction);
    queue_allowance_pkts: standing queue not worth draining (the jitter of uncoordinated senders)."""

    eta: float = 0.95
    drain_s: float = 0.100
    mtu_bytes: int = 1514
    min_share: float = 0.10
    queue_allowance_pkts: float = 0.0  # a standing queue up to this is left alone


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
    standing = max(0.0, link.queue_pkts - params.queue_allowance_pkts)
    drain_bps = standing * params.mtu_bytes * 8 / params.drain_s if params.drain_s > 0 else 0.0
    return max(link.capacity_bps * params.eta - drain_bps, link.capacity_bps * params.min_share)


def water_fill(demands: Sequence[Demand], capacity: Mapping[Any, float]) -> list[float]:
    """Weighted max-min fair rates (bit/s), one per demand, for links of the given capacity."""
    n = len(demands)
    rates = [0.0] * n
    frozen = [False] * n
    residual = dict(capacity)
    users: dict[Hashable, list[int]] = defaultdict(list)
    for i, demand in enumerate(demands):
        if demand.weight <= 0:
            raise ValueError(f"demand {demand.src}->{demand.dst}: weight must be > 0, got {demand.weight}")
        for link in demand.links:
            if link not in capacity:
                raise KeyError(f"demand {demand.src}->{demand.dst}: unknown link {link!r}")
            users[link].append(i)
        if demand.cap_bps is not None and demand.cap_bps <= 0:
            frozen[i] = True
    while not all(frozen):
        level = float("inf")
        weights: dict[Hashable, float] = {}
        for link, members in users.items():
            weight = sum(demands[i].weight for i in members if not frozen[i])
            if weight > 0:
                weights[link] = weight
                level = min(level, residual[link] / weight)
        for i, demand in enumerate(demands):
            if not frozen[i] and demand.cap_bps is not None:
                level = min(level, (demand.cap_bps - rates[i]) / demand.weight)
        if level == float("inf"):  # demands that cross no link and have no cap
            raise ValueError("a demand crosses no link and has no cap: its rate is unbounded")
        level = max(level, 0.0)
        for i, demand in enumerate(demands):
            if not frozen[i]:
                rates[i] += level * demand.weight
        for link, weight in weights.items():
            residual[link] -= level * weight
        for link in weights:
            if residual[link] <= EPS * max(1.0, capacity[link]):
                for i in users[link]:
                    frozen[i] = True
        for i, demand in enumerate(demands):
            if not frozen[i] and demand.cap_bps is not None and rates[i] >= demand.cap_bps - EPS * demand.cap_bps:
                frozen[i] = True
    return rates


def advise(demands: Sequence[Demand], links: Mapping[Any, LinkState],
           params: AdvisorParams | None = None) -> dict[tuple[str, str], float]:
    """Advised rate (bit/s) per (source host, destination): the sum of its demands' fair rates."""
    params = params or AdvisorParams()
    capacity = {link: offered_capacity(state, params) for link, state in links.items()}
    rates = water_fill(demands, capacity)
    out: dict[tuple[str, str], float] = defaultdict(float)
    for demand, rate in zip(demands, rates, strict=True):
        out[(demand.src, demand.dst)] += rate
    return dict(out)


def changed(new: dict[tuple[str, str], float], sent: dict[tuple[str, str], float],
            tolerance: float = 0.01) -> dict[tuple[str, str], float]:
    """The advice worth sending: new keys, and rates that moved by more than `tolerance` (relative)."""
    return {key: rate for key, rate in new.items()
            if key not in sent or abs(rate - sent[key]) > tolerance * max(sent[key], 1.0)}


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0
