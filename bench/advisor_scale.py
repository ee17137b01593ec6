"""Advisor compute time on a 3-tier fat-tree with >= 100,000 hosts and a ring all-reduce demand matrix.

    .venv/bin/python bench/advisor_scale.py [--k 74] [--rate-gbps 100]

k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores, k^3/4 hosts.
Every host sends to the next one in a ring (rank i -> i+1), the traffic of a ring all-reduce;
each demand's path is the one ECMP would pick (a hash of the pair chooses aggregation and core
switches). Prints the number of hosts, demands, links, the time to build the inputs and the
time of one advise() call, on one core.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.advisor import AdvisorParams, Demand, LinkState, advise  # noqa: E402


def ring_demands(k: int) -> tuple[list[Demand], set]:
    half = k // 2
    hosts = [(p, e, h) for p in range(k) for e in range(half) for h in range(half)]
    demands, links = [], set()
    for i, src in enumerate(hosts):
        dst = hosts[(i + 1) % len(hosts)]
        (sp, se, _), (dp, de, dh) = src, dst
        choice = zlib.crc32(f"{src}{dst}".encode())
        agg, core = choice % half, (choice // half) % half
        path = [("nic", src)]
        if (sp, se) == (dp, de):
            pass
        elif sp == dp:
            path += [("e2a", sp, se, agg), ("a2e", dp, agg, de)]
        else:
            path += [("e2a", sp, se, agg), ("a2c", sp, agg, core), ("c2a", agg, core, dp), ("a2e", dp, agg, de)]
        path.append(("e2h", dp, de, dh))
        links.update(path)
        demands.append(Demand(str(src), str(dst), tuple(path)))
    return demands, links


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=74, help="fat-tree arity (74: 101,306 hosts)")
    parser.add_argument("--rate-gbps", type=float, default=100.0)
    args = parser.parse_args()
    if args.k % 2:
        print("--k must be even", file=sys.stderr)
        return 2
    started = time.perf_counter()
    demands, link_ids = ring_demands(args.k)
    states = {link: LinkState(args.rate_gbps * 1e9) for link in link_ids}
    built = time.perf_counter() - started
    started = time.perf_counter()
    advice = advise(demands, states, AdvisorParams())
    compute = time.perf_counter() - started
    rates = sorted(advice.values())
    print(f"fat-tree k={args.k}: {len(demands):,} hosts in a ring, {len(demands):,} demands over "
          f"{len(states):,} links")
    print(f"inputs built in {built:.2f} s; advise() in {compute:.2f} s on one core")
    print(f"advised rates: min {rates[0] / 1e9:.2f} Gbit/s, median {rates[len(rates) // 2] / 1e9:.2f} Gbit/s, "
          f"max {rates[-1] / 1e9:.2f} Gbit/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
