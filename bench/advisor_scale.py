"""Advisor compute time at >= 100,000 hosts: a full recompute, and demands joining and leaving one at a time.

    .venv/bin/python bench/advisor_scale.py [--k 74] [--rate-gbps 100] [--changes 1000] [--seed 1]

k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores, k^3/4 hosts. Two
demand matrices: a ring (host i -> i+1, the traffic of a ring all-reduce; almost every demand stays
under its edge switch) and a random permutation (seeded; most demands cross the core, so links are
shared and the water-filling has many levels). Each demand's path is the one ECMP would pick (a hash
of the pair chooses aggregation and core switches). Prints, per matrix, the time to build the
inputs and of one advise() call, and for the permutation the time of each of `changes` random
leaves and joins (IncrementalFill) with the check that its rates equal a full recompute. One core.
Goals (issue "Performance"): full recompute <= 1 s; one demand joining or leaving <= 10 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.advisor import (  # noqa: E402
    AdvisorParams,
    Demand,
    IncrementalFill,
    LinkState,
    advise,
    offered_capacity,
    water_fill,
)

FULL_GOAL_S = 1.0
CHANGE_GOAL_S = 0.010
Host = tuple[int, int, int]


def hosts_of(k: int) -> list[Host]:
    half = k // 2
    return [(p, e, h) for p in range(k) for e in range(half) for h in range(half)]


def path(k: int, src: Host, dst: Host) -> tuple:
    half = k // 2
    (sp, se, _), (dp, de, dh) = src, dst
    choice = zlib.crc32(f"{src}{dst}".encode())
    agg, core = choice % half, (choice // half) % half
    hops: list[tuple] = [("nic", src)]
    if (sp, se) == (dp, de):
        pass
    elif sp == dp:
        hops += [("e2a", sp, se, agg), ("a2e", dp, agg, de)]
    else:
        hops += [("e2a", sp, se, agg), ("a2c", sp, agg, core), ("c2a", agg, core, dp), ("a2e", dp, agg, de)]
    hops.append(("e2h", dp, de, dh))
    return tuple(hops)


def all_links(k: int) -> set:
    half = k // 2
    links: set = set()
    for p, e, h in hosts_of(k):
        links |= {("nic", (p, e, h)), ("e2h", p, e, h)}
    for p in range(k):
        for e in range(half):
            for a in range(half):
                links |= {("e2a", p, e, a), ("a2e", p, a, e)}
        for a in range(half):
            for c in range(half):
                links |= {("a2c", p, a, c), ("c2a", a, c, p)}
    return links


def demands_of(k: int, pattern: str, rng: random.Random) -> list[Demand]:
    hosts = hosts_of(k)
    if pattern == "ring":
        pairs = [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts)]
    else:
        targets = hosts[:]
        rng.shuffle(targets)
        pairs = [(s, d) for s, d in zip(hosts, targets, strict=True) if s != d]
    return [Demand(str(s), str(d), path(k, s, d)) for s, d in pairs]


def full(k: int, pattern: str, rng: random.Random, states: dict) -> list[Demand]:
    started = time.perf_counter()
    demands = demands_of(k, pattern, rng)
    built = time.perf_counter() - started
    started = time.perf_counter()
    advice = advise(demands, states, AdvisorParams())
    compute = time.perf_counter() - started
    rates = sorted(advice.values())
    verdict = "met" if compute <= FULL_GOAL_S else "NOT met"
    print(f"{pattern:11}: {len(demands):,} demands over {len(states):,} links; inputs built in {built:.2f} s; "
          f"advise() in {compute:.2f} s (goal <= {FULL_GOAL_S:.0f} s: {verdict}); rates min {rates[0] / 1e9:.2f}, "
          f"median {rates[len(rates) // 2] / 1e9:.2f}, max {rates[-1] / 1e9:.2f} Gbit/s")
    return demands


def incremental(k: int, demands: list[Demand], capacity: dict, changes: int, rng: random.Random) -> bool:
    hosts = hosts_of(k)
    fair = IncrementalFill(capacity)
    live = dict(enumerate(demands))
    started = time.perf_counter()
    fair.reset(live)
    print(f"incremental: initial state (a full recompute) in {time.perf_counter() - started:.2f} s")
    times: list[float] = []
    touched: list[int] = []
    next_key = len(demands)
    for i in range(changes):
        started = time.perf_counter()
        if i % 2 == 0:
            key = rng.choice(list(live)) if i % 200 else min(live)
            fair.leave(key)
            del live[key]
        else:
            src, dst = rng.sample(hosts, 2)
            live[next_key] = Demand(str(src), str(dst), path(k, src, dst))
            fair.join(next_key, live[next_key])
            next_key += 1
        times.append(time.perf_counter() - started)
        touched.append(fair.refilled)
    times.sort()
    median, p99 = statistics.median(times), times[int(0.99 * (len(times) - 1))]
    verdict = "met" if p99 <= CHANGE_GOAL_S else "NOT met"
    print(f"incremental: {changes} changes (leave a random demand / join a random pair): median {median * 1e3:.2f} ms, "
          f"p99 {p99 * 1e3:.2f} ms, max {times[-1] * 1e3:.2f} ms (goal <= {CHANGE_GOAL_S * 1e3:.0f} ms: {verdict}); "
          f"demands re-filled per change: median {statistics.median(touched):.0f}, max {max(touched)}")
    keys = sorted(live)
    started = time.perf_counter()
    expected = water_fill([live[key] for key in keys], capacity)
    got = fair.rates()
    worst = max(abs(got[key] - rate) / max(rate, 1.0) for key, rate in zip(keys, expected, strict=True))
    ok = got.keys() == set(keys) and worst <= 1e-6
    print(f"incremental: equal to a full recompute ({time.perf_counter() - started:.2f} s) within "
          f"{worst:.1e} relative: {'yes' if ok else 'NO'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=74, help="fat-tree arity (74: 101,306 hosts)")
    parser.add_argument("--rate-gbps", type=float, default=100.0)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.k % 2:
        print("--k must be even", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    states = {link: LinkState(args.rate_gbps * 1e9) for link in all_links(args.k)}
    print(f"fat-tree k={args.k}: {len(hosts_of(args.k)):,} hosts, {len(states):,} links, one core")
    full(args.k, "ring", rng, states)
    demands = full(args.k, "permutation", rng, states)
    params = AdvisorParams()
    capacity = {link: offered_capacity(state, params) for link, state in states.items()}
    return 0 if incremental(args.k, demands, capacity, args.changes, rng) else 1


if __name__ == "__main__":
    sys.exit(main())
