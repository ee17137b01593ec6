"""What a fabric needs in machines at a given link rate: the CPU model (emulation/budget.py, calibrated on
this machine: ~40 µs a frame-hop, 0.03 core an idle switch, 0.04 a host, 0.25 the controller) and the
placement (emulation/placement.py) over fat-trees, for two traffic patterns.

    .venv/bin/python bench/cluster_plan.py [--k 4,8,16] [--mbps 10,20,40,100] [--cores 2,32] [--seed 1]

Traffic: a ring all-reduce over every host in topology order (most of it stays under its edge
switch) and a random permutation (seeded; most of it crosses the core), each host at its link
rate. Per cell: the frame-hops a second, the CPU, the busiest switch, and the fewest machines of
each size that hold it with the number of links that cross machines (tunnels) — or why none does:
a soft switch is one process and cannot use more than one core, so a switch that needs more is
beyond emulation at that rate on any cluster; the rate at which the busiest switch fits is given.
A model, not a measurement: what the tunnels between machines cost is not in it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emulation import budget  # noqa: E402
from emulation.placement import SWITCH_CORE_LIMIT, machines_needed, place  # noqa: E402
from topologies import fattree  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", default="4,8,16")
    parser.add_argument("--mbps", default="10,20,40,100")
    parser.add_argument("--cores", default="2,32", help="cores per machine, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(c) for c in args.cores.split(",")]
    print("| fat-tree | hosts | switches | link Mbit/s | traffic | frame-hops/s | CPU (cores) | busiest switch "
          "(cores) | " + " | ".join(f"machines of {c} cores (crossing links)" for c in sizes) + " |")
    print("|" + "---|" * (8 + len(sizes)))
    for k in (int(x) for x in args.k.split(",")):
        for mbps in (float(x) for x in args.mbps.split(",")):
            started = time.monotonic()
            topo = fattree(k, capacity_mbps=mbps)
            hosts = [h.name for h in topo.hosts]
            shuffled = hosts[:]
            random.Random(args.seed).shuffle(shuffled)
            patterns = {"ring": budget.ring_flows(hosts),
                        "permutation": [(a, b) for a, b in zip(hosts, shuffled, strict=True) if a != b]}
            for name, flows in patterns.items():
                one = place(topo, ["m1"], flows)
                frames = sum(budget.switch_frames(topo, flows).values())
                busiest = max(one.switch_cores.values())
                cells = []
                for cores in sizes:
                    p = machines_needed(topo, flows, cores)
                    if p is None and one.too_busy:
                        idle = budget.IDLE_SWITCH_CORES
                        fits = mbps * (SWITCH_CORE_LIMIT - idle) / (busiest - idle)
                        cells.append(f"none: a switch needs {busiest:.1f} cores (fits at ≤ {fits:.0f} Mbit/s)")
                    elif p is None:
                        cells.append("more than 4096")
                    else:
                        cells.append(f"{len(p.machines)} ({len(p.crossing)})")
                print(f"| k={k} | {len(hosts)} | {len(topo.switches)} | {mbps:g} | {name} | {frames / 1000:,.0f}k | "
                      f"{one.busiest:.1f} | {busiest:.2f} | " + " | ".join(cells) + " |", flush=True)
            print(f"  (k={k} at {mbps:g} Mbit/s planned in {time.monotonic() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
