"""What the controller's parts cost as the fabric grows, and what that makes of them at 100,000 GPUs.

    .venv/bin/python bench/controller_scale.py [--k 4,8,12,14] [--reports 20000] [--seed 1]
                                              [--gpu-gbps 400] [--mtu 4096]

Measured here, one core, on k-ary fat-trees the address plan holds (at most 250 switches: k <= 14):
- routing (controller/routing.compute_routes): every switch's /32 route to every host with all its
  shortest-path next hops, as the controller computes them at start and after every link change —
  the time, the entries per switch and in all;
- the INT collector (controller/telemetry.Collector.feed): reports of 5-hop paths (a fat-tree's
  longest) of distinct flows — the time per report.
Then, for a k=74 fat-tree (101,306 hosts, as bench/advisor_scale.py plans in 0.39 s): routing's time
extrapolated from the measured sizes (it grows as hosts x (switches + links)), its entries counted,
and the INT reports a second and the cores the collector would need when every GPU sends at its
line rate (`--gpu-gbps`, frames of `--mtu` bytes) with INT on 1 packet in 2^N (the controller's
default N, controller/program.INT_SAMPLE_LOG2). A model beyond the measured sizes, not a measurement.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

from controller.program import INT_SAMPLE_LOG2  # noqa: E402
from controller.routing import compute_routes  # noqa: E402
from controller.telemetry import Collector  # noqa: E402
from topologies import fattree  # noqa: E402
from topologies.addressing import AddressPlan  # noqa: E402
from wire.intmd import DSCP_INT, Hop, IntStack  # noqa: E402

PAPER_K = 74  # 101,306 hosts


def fattree_size(k: int) -> tuple[int, int, int]:
    """(hosts, switches, links) of a k-ary fat-tree."""
    hosts = k ** 3 // 4
    return hosts, 5 * k * k // 4, hosts + k ** 3 // 2  # host links, edge-agg and agg-core links


def time_routes(k: int) -> tuple[float, int, int]:
    """(seconds, entries per switch, entries in all) of compute_routes on fattree(k)."""
    topo = fattree(k)
    plan = AddressPlan(topo)
    t0 = time.perf_counter()
    routes = compute_routes(topo, plan)
    took = time.perf_counter() - t0
    return took, max(len(r) for r in routes.values()), sum(len(r) for r in routes.values())


def report_frames(count: int, rng: random.Random) -> list[bytes]:
    """INT reports of 5-hop paths over 40 switches' ports, each of another flow (source port)."""
    frames = []
    for i in range(count):
        hops = [Hop(rng.randrange(1, 41), 1, rng.randrange(1, 9), rng.randrange(20, 400), rng.randrange(0, 64),
                    (i * 100 + h) % (1 << 32), (i * 9000) % (1 << 32), 100) for h in range(5)]
        stack = IntStack(orig_dscp=0, remaining_hop_cnt=1, hops=hops)
        frames.append(bytes(Ether() / IP(src=f"10.0.{rng.randrange(1, 250)}.{rng.randrange(1, 250)}",
                                          dst=f"10.0.{rng.randrange(1, 250)}.{rng.randrange(1, 250)}",
                                          tos=DSCP_INT << 2)
                            / UDP(sport=1024 + i % 60000, dport=5000) / (stack.pack() + b"x" * 64)))
    return frames


def time_collector(count: int, rng: random.Random) -> float:
    """Seconds per report fed to the collector."""
    frames = report_frames(count, rng)
    collector = Collector({n: f"s{n}" for n in range(1, 41)})
    now = 1000.0
    t0 = time.perf_counter()
    for i, frame in enumerate(frames):
        collector.feed(frame, now + i * 1e-6)
    took = time.perf_counter() - t0
    assert collector.reports == count and collector.bad_reports == 0, (collector.reports, collector.bad_reports)
    return took / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", default="4,8,12,14", help="fat-tree sizes to measure routing on")
    parser.add_argument("--reports", type=int, default=20000, help="INT reports to feed the collector")
    parser.add_argument("--gpu-gbps", type=float, default=400.0, help="a GPU's NIC rate at paper scale")
    parser.add_argument("--mtu", type=int, default=4096, help="frame size at paper scale (RoCE's 4096)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    print("| fat-tree | hosts | switches | links | routing (s) | entries per switch | entries in all |")
    print("|---|---|---|---|---|---|---|")
    fit = []
    for k in (int(x) for x in args.k.split(",")):
        hosts, switches, links = fattree_size(k)
        took, per_switch, total = time_routes(k)
        fit.append(took / (hosts * (switches + links)))
        print(f"| k={k} | {hosts:,} | {switches:,} | {links:,} | {took:.3f} | {per_switch:,} | {total:,} |", flush=True)
    hosts, switches, links = fattree_size(PAPER_K)
    per_unit = fit[-1]  # the largest size measured: the least start-up in it
    routing = per_unit * hosts * (switches + links)
    print(f"| k={PAPER_K} (model) | {hosts:,} | {switches:,} | {links:,} | ~{routing:,.0f} | {hosts:,} "
          f"| {hosts * switches:,} |")

    per_report = time_collector(args.reports, rng)
    pps = args.gpu_gbps * 1e9 / 8 / args.mtu
    every_packet = hosts * pps
    reports = every_packet / 2 ** INT_SAMPLE_LOG2
    one_core = math.ceil(math.log2(every_packet * per_report))
    print(f"\nINT collector: {per_report * 1e6:.1f} µs a report ({args.reports:,} reports of 5-hop paths, one core)")
    print(f"at k={PAPER_K}: {hosts:,} GPUs at {args.gpu_gbps:g} Gbit/s in {args.mtu}-byte frames ({pps / 1e6:.1f} "
          f"Mpps each), INT on 1 packet in {2 ** INT_SAMPLE_LOG2}: {reports:.2e} reports/s, "
          f"{reports * per_report:,.0f} cores of this collector; one core keeps up with INT on 1 packet in "
          f"2^{one_core} ({2 ** one_core:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
