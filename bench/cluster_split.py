"""The default fabric on one server and split over two, side by side: what crossing servers costs.

    sudo .venv/bin/python bench/cluster_split.py [--runs 3] [--seconds 10] [--size-mb 8]

Per run, the default leaf-spine testbed (soft switch, mode none) comes up twice: on this machine
alone, then split between it and a namespace server (`Testbed(servers="ns")`, emulation/cluster.py:
every leaf–spine link a VXLAN tunnel). On each: the RTT of a host pair whose path crosses the spines
(h1 → h5: on two servers, through a tunnel), one iperf3 TCP flow on that path, and an 8-rank ring
all-reduce — each with the fidelity verdict of its own time. Goals (issue "Cluster mode"): the flow
across servers at >= 90% of the link's shaped rate, the tunnel adding <= 0.5 ms of RTT, the
all-reduce's busbw within 10% of the one-server figure. The split run's timing is also judged per
server (the switches on each). The namespace server shares this machine's 2 cores: the split fabric
has no more CPU than the whole one, so this measures the tunnels and the SSH-reached control, not
the capacity a second machine adds. `--topo fattree --capacity-mbps 20`: the k=4 fat-tree instead
(the pair h1 → h9 crosses its core; the ring over its 16 hosts), at the link rate given. With `--split-mbps`
the split fabric runs at another rate (`--capacity-mbps 5 --split-mbps 10`: twice the one-server rate),
its busbw compared as a share of its link. Results:
cluster_split.json in the current directory.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulation.net import Testbed  # noqa: E402
from emulation.traffic import iperf3_tcp  # noqa: E402
from topologies import fattree, leafspine  # noqa: E402
from topologies.spec import Topology  # noqa: E402
from workloads.allreduce.job import JobSpec, run_job  # noqa: E402
from workloads.fabric import FabricView  # noqa: E402

PAIRS = {"leafspine": ("h1", "h5"), "fattree": ("h1", "h9")}  # across the spines / the core: a tunnel when split
GOAL_RATE = 0.90  # of the link's shaped rate
GOAL_RTT_MS = 0.5  # added by crossing servers
GOAL_BUSBW = 0.90  # of the one-server figure


def rtt_ms(tb: Testbed, a: str, b: str, count: int = 100) -> float:
    """Median RTT a → b over `count` pings 20 ms apart (the first, with its ARP, left out)."""
    out = tb.host(a).cmd(f"ping -c {count + 1} -i 0.02 {tb.host(b).IP()}")
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)][1:]
    if len(times) < count // 2:
        raise RuntimeError(f"ping {a} -> {b}: {len(times)} of {count} answered:\n{out[-500:]}")
    return statistics.median(times)


def measure(make: Callable[[], Topology], pair: tuple[str, str], servers: str | None, seconds: int, size_mb: int,
            run: int) -> dict:
    name = f"bench-cluster-{servers or 'one'}"
    topo = make()
    hosts = [h.name for h in topo.hosts]
    with Testbed(topo, dataplane="soft", name=name, mode="none", servers=servers) as tb:
        on: dict[str, list[str]] = {}
        if tb.cluster is not None:
            for node, server in tb.cluster.server_of.items():
                on.setdefault(server, []).append(node)
        where = "one server" if servers is None else (
            "two servers (on srv2: " + ", ".join(sorted(on.get("srv2", []))) + ")")
        print(f"run {run}, {where}: {tb.run_dir}", flush=True)
        link = tb.topo.host_link(pair[0]).capacity_mbps
        t0 = tb.now()
        rtt = rtt_ms(tb, *pair)
        rate, _ = iperf3_tcp(tb.host(pair[0]), tb.host(pair[1]), seconds=seconds, port=5201 + run)
        path_verdict = tb.verdict(t0, tb.now())
        t1 = tb.now()
        outcome = run_job(JobSpec(hosts=hosts, sizes=[size_mb << 20], algo="ring", iters=3, warmup=1,
                                  name=f"ring-{run}"), FabricView.of_testbed(tb), progress=None)
        t2 = tb.now()
        ring_verdict = tb.verdict(t1, t2)
        (result,) = outcome.results
        figures = {"servers": servers or "one", "rtt_ms": rtt, "rate_mbps": rate, "link_mbps": link,
                   "busbw_mbps": result.busbw_gbs * 8e3, "wrong": outcome.wrong,
                   "path_faithful": path_verdict.fraction, "ring_faithful": ring_verdict.fraction}
        print(f"  RTT {pair[0]} -> {pair[1]} {rtt:.3f} ms; iperf3 {rate:.2f} of {link:g} Mbit/s; {path_verdict.line()}")
        print(f"  ring all-reduce, {len(hosts)} ranks, {size_mb} MB: busbw {figures['busbw_mbps']:.2f} Mbit/s, "
              f"{outcome.wrong} wrong; {ring_verdict.line()}", flush=True)
        for server, nodes in sorted(on.items()):  # the ring's timing judged on each server's switches
            switches = sorted(n for n in nodes if tb.topo.is_switch(n))
            per = tb.verdict(t1, t2, switches)
            figures[f"ring_faithful_{server}"] = per.fraction
            print(f"    on {server} ({len(switches)} switches): timing held in {100 * per.fraction:.1f}% of "
                  f"{len(per.windows)} windows" + (f"; worst {per.worst_ms:.1f} ms on {per.worst_source}"
                                                   if per.worst_source else ""), flush=True)
        return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10, help="iperf3's duration (default 10)")
    parser.add_argument("--size-mb", type=int, default=8, help="the all-reduce's size (default 8)")
    parser.add_argument("--topo", choices=sorted(PAIRS), default="leafspine",
                        help="the default leaf-spine, or the k=4 fat-tree (default leafspine)")
    parser.add_argument("--capacity-mbps", type=float, default=None, help="every link's rate (default: the topology's)")
    parser.add_argument("--split-mbps", type=float, default=None,
                        help="every link's rate on two servers (default: --capacity-mbps): e.g. twice the rate one "
                             "server holds; then busbw is compared as a share of each one's link")
    args = parser.parse_args()
    if args.runs < 1 or args.seconds < 1 or args.size_mb < 1:
        parser.error("--runs, --seconds and --size-mb must be >= 1")

    def maker(mbps: float | None) -> Callable[[], Topology]:
        def make() -> Topology:
            if args.topo == "leafspine":
                return leafspine() if mbps is None else leafspine(capacity_mbps=mbps)
            return fattree(4) if mbps is None else fattree(4, capacity_mbps=mbps)
        return make

    makes = {None: maker(args.capacity_mbps), "ns": maker(args.split_mbps or args.capacity_mbps)}
    rows: list[dict] = []
    for run in range(1, args.runs + 1):
        for servers in (None, "ns"):
            rows.append(measure(makes[servers], PAIRS[args.topo], servers, args.seconds, args.size_mb, run))
            time.sleep(1)
    Path("cluster_split.json").write_text(json.dumps(rows, indent=1))
    one = [r for r in rows if r["servers"] == "one"]
    two = [r for r in rows if r["servers"] == "ns"]

    def med(rs: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rs)

    link, split_link = one[0]["link_mbps"], two[0]["link_mbps"]
    rate_share = med(two, "rate_mbps") / split_link
    rtt_added = med(two, "rtt_ms") - med(one, "rtt_ms")
    busbw_share = (med(two, "busbw_mbps") / split_link) / (med(one, "busbw_mbps") / link)
    goals = [(f"flow across servers, share of the {split_link:g} Mbit/s link", f"{rate_share:.0%}",
              f">= {GOAL_RATE:.0%}", rate_share >= GOAL_RATE),
             ("RTT added by crossing servers", f"{rtt_added:+.3f} ms", f"<= {GOAL_RTT_MS} ms",
              rtt_added <= GOAL_RTT_MS),
             ("all-reduce busbw (share of its link), two servers / one", f"{busbw_share:.2f}",
              f">= {GOAL_BUSBW:.2f}",
              busbw_share >= GOAL_BUSBW)]
    print(f"\nlinks at {link:g} Mbit/s on one server, {split_link:g} on two")
    print(f"medians over {args.runs} runs: one server RTT {med(one, 'rtt_ms'):.3f} ms, iperf3 "
          f"{med(one, 'rate_mbps'):.2f} Mbit/s, busbw {med(one, 'busbw_mbps'):.2f} Mbit/s; two servers RTT "
          f"{med(two, 'rtt_ms'):.3f} ms, iperf3 {med(two, 'rate_mbps'):.2f} Mbit/s, busbw "
          f"{med(two, 'busbw_mbps'):.2f} Mbit/s")
    print(f"windows faithful (median): one server {med(one, 'path_faithful'):.0%} (path) / "
          f"{med(one, 'ring_faithful'):.0%} (ring), two servers {med(two, 'path_faithful'):.0%} / "
          f"{med(two, 'ring_faithful'):.0%}")
    for label, figure, goal, met in goals:
        print(f"  {label:45} {figure:>9}  goal {goal}: {'met' if met else 'NOT met'}")
    wrong = sum(r["wrong"] for r in rows)
    print(f"  all-reduce results wrong: {wrong}")
    return 0 if all(met for *_, met in goals) and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
