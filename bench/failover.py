"""Self-healing timeline on the default fabric, repeated: the median of every step against its goal.

    sudo .venv/bin/python bench/failover.py [--runs 5] [--cases local,remote]

One leaf-spine testbed (soft switch, mode advice). Each run is lab/failover.py's cut under a
ring all-reduce h1 h2 h5 h6 (8 MB, 3 iterations), restored after the job:
- local: the spine uplink the h2 → h5 flow crosses is cut; s3, the flow's own leaf, moves it to
  the other spine by itself (its ECMP members watch their ports).
- remote: the spine's downlink to s3 that h6 → h1 crosses is cut; only the controller can move that
  flow (s4's routes to s3's hosts must leave the spine).
Goals (issue #8): longest gap in the affected flow ≤ 100 ms, fault → advice updated ≤ 500 ms. Per
run the fidelity verdict of the 2 s around the cut. Results: failover.json in the run directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulation import budget  # noqa: E402
from emulation.net import Testbed  # noqa: E402
from lab.failover import cut_during_ring  # noqa: E402
from topologies import leafspine  # noqa: E402

CASES = {"local": (("h2", "h5"), None), "remote": (("h6", "h1"), "s3")}
STEPS = [("carrier_ms", "carrier gone (kernel)", None), ("detected_ms", "detected by the controller", None),
         ("routes_ms", "routes written", None),
         ("advice_ms", "advice updated", 500.0), ("gap_ms", "longest gap in the flow", 100.0),
         ("blind_ms", "sampler's longest silence", None),
         ("back_ms", "restore -> back in service", None)]
PORT_BASE = 23000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cases", default="local,remote", help="comma-separated: local, remote")
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or args.runs < 1:
        parser.error(f"--cases from {', '.join(CASES)}; --runs >= 1 (got {unknown or args.runs})")
    results: dict[str, list[dict]] = {c: [] for c in cases}
    print(budget.ring(leafspine(), ["h1", "h2", "h5", "h6"]).line())
    with Testbed(leafspine(), dataplane="soft", name="bench-failover", mode="advice") as tb:
        print(f"run directory: {tb.run_dir}", flush=True)
        for i in range(args.runs):
            for case in cases:
                flow, cut_end = CASES[case]
                slot = (i * len(cases) + cases.index(case)) % 20  # a range of its own: spine_of tells jobs by ports
                f = cut_during_ring(tb, flow, cut_end, PORT_BASE + 100 * slot, quiet=True)
                results[case].append(f)
                print(f"{case:6} run {i + 1}: {f['link']} cut; carrier gone {f['carrier_ms']:.1f} ms, "
                      f"detected {f['detected_ms']:.1f} ms, routes {f['routes_ms']:.1f} ms ({f['route_updates']} "
                      f"updates), advice {f['advice_ms']:.1f} ms, "
                      f"gap {f['gap_ms']:.0f} ms (sampler silent {f['blind_ms']:.0f}), back {f['back_ms']:.0f} ms; "
                      f"busbw {f['busbw_mbps']:.2f} Mbit/s, "
                      f"{f['wrong']} wrong; {f['verdict'].line()}", flush=True)
        out = tb.run_dir / "failover.json"
        out.write_text(json.dumps({c: [{k: v for k, v in f.items() if k not in ("verdict", "seen")}
                                       | {"faithful": f["verdict"].fraction} for f in rs]
                                   for c, rs in results.items()}, indent=1))
    failed = False
    for case, rs in results.items():
        print(f"\n{case}: median (min-max) of {len(rs)} runs")
        for key, label, goal in STEPS:
            values = [f[key] for f in rs]
            median = statistics.median(values)
            verdict = "" if goal is None else f"  goal <= {goal:.0f} ms: {'met' if median <= goal else 'NOT met'}"
            failed |= goal is not None and median > goal
            print(f"  {label:30} {median:7.1f} ms  ({min(values):.1f}-{max(values):.1f}){verdict}")
        print(f"  {'results correct':30} {sum(f['wrong'] == 0 for f in rs)}/{len(rs)}; windows faithful around "
              f"the cut: median {100 * statistics.median(f['verdict'].fraction for f in rs):.0f}%")
    print(f"\nresults: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
