"""Flow schedules: which host sends how many bytes to which, when (seconds after the job's start).

Pure functions of their arguments and seed, so a run is reproduced by its parameters.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from controller.advisor import Demand, water_fill


@dataclass(frozen=True)
class Flow:
    """id: unique in a job; src, dst: host names; start_s: after the job's t0; size_bytes: payload."""

    id: int
    src: str
    dst: str
    start_s: float
    size_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def incast(receiver: str, senders: list[str], size_bytes: int, start_s: float = 0.0) -> list[Flow]:
    """Every sender sends size_bytes to receiver at the same moment (the partition/aggregate pattern)."""
    if not senders:
        raise ValueError("senders: an incast needs at least one sender")
    if receiver in senders:
        raise ValueError(f"senders: the receiver {receiver} cannot also send to itself")
    if len(set(senders)) != len(senders):
        raise ValueError(f"senders: {' '.join(senders)} lists a host twice")
    if size_bytes < 1:
        raise ValueError(f"size: must be >= 1 byte, got {size_bytes}")
    return [Flow(i, s, receiver, start_s, size_bytes) for i, s in enumerate(senders)]


def log_uniform_mean(lo: int, hi: int) -> float:
    """Mean of a log-uniform distribution on [lo, hi]."""
    return float(lo) if hi == lo else (hi - lo) / math.log(hi / lo)


def background(hosts: list[str], seconds: float, load: float, link_mbps: float, seed: int,
               min_bytes: int = 16 << 10, max_bytes: int = 2 << 20) -> list[Flow]:
    """Poisson flow arrivals at every host for `seconds`, each to a uniformly chosen other host,
    sizes log-uniform in [min_bytes, max_bytes] (many small flows, a few large ones carry most bytes);
    the arrival rate offers `load` (0..1) of each host's link_mbps on average."""
    if len(hosts) < 2:
        raise ValueError("hosts: background flows need at least 2 hosts")
    if not 0 < load <= 1:
        raise ValueError(f"load: must be in (0, 1], got {load}")
    if seconds <= 0:
        raise ValueError(f"seconds: must be > 0, got {seconds}")
    if not 1 <= min_bytes <= max_bytes:
        raise ValueError(f"sizes: need 1 <= min <= max, got {min_bytes} and {max_bytes}")
    rng = random.Random(seed)
    rate_per_s = load * link_mbps * 1e6 / 8 / log_uniform_mean(min_bytes, max_bytes)
    flows: list[Flow] = []
    for src in hosts:
        t = rng.expovariate(rate_per_s)
        while t < seconds:
            dst = rng.choice([h for h in hosts if h != src])
            size = int(round(math.exp(rng.uniform(math.log(min_bytes), math.log(max_bytes)))))
            flows.append(Flow(0, src, dst, round(t, 6), size))
            t += rng.expovariate(rate_per_s)
    flows.sort(key=lambda f: (f.start_s, f.src))
    return [Flow(i, f.src, f.dst, f.start_s, f.size_bytes) for i, f in enumerate(flows)]


PATTERNS = ("stride", "staggered", "random")


def hedera(pattern: str, hosts: list[str], edge_of: dict[str, str], pod_of: dict[str, str], size_bytes: int,
           seed: int, stride: int = 1, p_edge: float = 0.5, p_pod: float = 0.3) -> list[Flow]:
    """Hedera's traffic patterns (Al-Fares et al., NSDI'10 §6.1), one long flow of size_bytes from
    every host, all at once: stride(i) — host x (in `hosts` order) sends to host x + i (mod n);
    staggered(p_edge, p_pod) — to a host under its own edge switch with probability p_edge, in its
    own pod (another edge) with p_pod, elsewhere with the rest; random — a random permutation in
    which no host sends to itself. edge_of: host → its switch; pod_of: host → its pod."""
    n = len(hosts)
    if n < 2 or len(set(hosts)) != n:
        raise ValueError("hosts: a pattern needs at least 2 distinct hosts")
    if size_bytes < 1:
        raise ValueError(f"size: must be >= 1 byte, got {size_bytes}")
    rng = random.Random(seed)
    if pattern == "stride":
        if stride % n == 0:
            raise ValueError(f"stride: {stride} is a multiple of the {n} hosts (every host would send to itself)")
        dsts = [hosts[(i + stride) % n] for i in range(n)]
    elif pattern == "staggered":
        if not (0 <= p_edge <= 1 and 0 <= p_pod <= 1 and p_edge + p_pod <= 1):
            raise ValueError(f"p_edge, p_pod: need 0 <= each and p_edge + p_pod <= 1, got {p_edge} and {p_pod}")
        dsts = []
        for src in hosts:
            same_edge = [h for h in hosts if h != src and edge_of[h] == edge_of[src]]
            same_pod = [h for h in hosts if pod_of[h] == pod_of[src] and edge_of[h] != edge_of[src]]
            others = [h for h in hosts if pod_of[h] != pod_of[src]]
            draw = rng.random()
            choice = same_edge if draw < p_edge else same_pod if draw < p_edge + p_pod else others
            dsts.append(rng.choice(choice or [h for h in hosts if h != src]))
    elif pattern == "random":
        while True:
            dsts = hosts[:]
            rng.shuffle(dsts)
            if all(a != b for a, b in zip(hosts, dsts, strict=True)):
                break
    else:
        raise ValueError(f"pattern: {pattern!r} is not one of {', '.join(PATTERNS)}")
    return [Flow(i, src, dst, 0.0, size_bytes) for i, (src, dst) in enumerate(zip(hosts, dsts, strict=True))]


def nonblocking_rates(pairs: list[tuple[str, str]], nic_mbps: float) -> list[float]:
    """Each (source, destination) flow's rate on a non-blocking switch, where only the hosts' NICs
    limit: max-min fair, so two flows into one host share its NIC. With equal sizes and one start,
    as in Hedera's patterns, flows into one host end together and these are also their average
    throughputs; a permutation gives every flow its NIC rate. Hedera's "optimal" is this switch's."""
    demands = [Demand(src, dst, (("tx", src), ("rx", dst))) for src, dst in pairs]
    return water_fill(demands, {end: nic_mbps for d in demands for end in d.links})
