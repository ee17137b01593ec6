"""Incast 6→1 on the default fabric in every control mode, repeated, with the fidelity verdict of every run.

    sudo .venv/bin/python bench/incast_fidelity.py [--runs 10] [--modes advice,ecn,none,bbr]
        [--reference runs/<ns-3 run>/results.json]

One leaf-spine testbed; the modes are switched with SetMode between runs (advice cleared before a
`none` run). Each run is lab/incast.py's measurement: six iperf3 TCP flows into h5 for 8 s
after 3 s of slow start; the bottleneck is s4's port to h5 (20 Mbit/s, 64 packets). Per run it
prints the queue over faithful windows (p99, p90) and over all, drops in faithful windows and in
flagged ones (per window), Jain's index, utilisation and the verdict. Goals (issue "Fidelity and
gate"): in advice mode, over faithful windows, p99 queue ≤ 5 packets and 0 drops in ≥ 9 of 10
runs, and every advice-mode drop in a window the monitor flagged. Results: results.json in the run
directory.

Every sender's TCP state is sampled every 10 ms (lab/tcpstate.py; --no-tcp-state to leave it
out): per mode, a line per sender (congestion control, ECN, cwnd, RTT, retransmissions, CE share,
time per CA state) and tcp-<mode>.png (cwnd per sender over the bottleneck queue, with the ECN
threshold). At the end, the modes side by side (mean over runs); with --reference, the rows of
experiments/reference/incast_ns3.py (ns-3, the same incast outside the emulator) beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulation import budget  # noqa: E402
from emulation.fidelity import read_records  # noqa: E402
from emulation.net import Testbed  # noqa: E402
from lab.incast import BOTTLENECK, RECEIVER, SENDERS, IncastResult, pacing_cleared, run_incast  # noqa: E402
from lab.tcpplot import bottleneck_queue, plot, summarise  # noqa: E402
from topologies import leafspine  # noqa: E402
from wire.fidelity import DEFAULT_TOLERANCE_MS  # noqa: E402

P99_GOAL, RUNS_GOAL = 5, 0.9


def row(i: int, r: IncastResult) -> str:
    flagged = ", ".join(f"t={t:.1f}:{d}" for t, d in sorted(r.drops_flagged.items())) or "-"
    drops, in_flagged = ((f"{r.drops_faithful}", f"{sum(r.drops_flagged.values())}") if r.drops_measured
                         else ("n/a", "n/a"))
    return (f"{r.mode:7} {i:>3} {100 * r.verdict.fraction:6.1f}% {r.p(0.99):>5.0f} {r.p(0.90):>5.0f} "
            f"{r.p(0.99, False):>5.0f} {drops:>6} {in_flagged:>7} "
            f"{r.jain:6.3f} {r.utilisation:5.2f}  {flagged if r.drops_measured else 'drops not measured (BMv2)'}")


def tcp_report(tb: Testbed, results: dict[str, list[IncastResult]], threshold: int, limit: int) -> None:
    """Per mode, the senders' TCP state over the first run's measured span, and its plot."""
    for mode, rs in results.items():
        r = rs[0]
        if not r.tcp_files:
            continue
        print(f"\nTCP state of the senders, {mode} (run 1, {r.t1 - r.t0:.1f} s measured, samples every 10 ms):")
        for sender, path in sorted(r.tcp_files.items()):
            summary = summarise(sender, path, r.t0, r.t1)
            print("  " + (summary.line() if summary else f"{sender}: no samples"))
        png = tb.run_dir / f"tcp-{mode}.png"
        queue = bottleneck_queue(tb.run_dir / "telemetry.csv", *BOTTLENECK, r.t0, r.t1)
        plot(png, f"incast 6->1, mode {mode}: senders' cwnd and the bottleneck queue (s4 port 1)", r.tcp_files,
             queue, r.t0, r.t1, threshold if mode == "ecn" else 0, limit)
        print(f"  plot: {png}")


def side_by_side(results: dict[str, list[IncastResult]], reference: dict | None) -> str:
    """The modes as columns (mean over runs), ns-3's reference rows beside them when given."""
    columns: list[tuple[str, dict[str, float]]] = []
    for mode, rs in results.items():
        columns.append((mode, {
            "p50 queue (pkts)": mean([r.p(0.50) for r in rs]), "p90 queue (pkts)": mean([r.p(0.90) for r in rs]),
            "p99 queue (pkts)": mean([r.p(0.99) for r in rs]),
            "drops per s": mean([r.drops / max(r.t1 - r.t0, 1e-9) for r in rs]) if all(
                r.drops_measured for r in rs) else float("nan"),
            "Jain (6 senders)": mean([r.jain for r in rs]),
            "goodput min/max (Mbit/s)": (mean([min(r.rates) for r in rs]), mean([max(r.rates) for r in rs])),
            "windows faithful": mean([r.verdict.fraction for r in rs]) * 100}))
    for mode, row in (reference or {}).get("modes", {}).items():
        columns.append((f"ns-3 {mode}", {
            "p50 queue (pkts)": row["queue_p50"], "p90 queue (pkts)": row["queue_p90"],
            "p99 queue (pkts)": row["queue_p99"], "drops per s": row["drops_per_s"], "Jain (6 senders)": row["jain"],
            "goodput min/max (Mbit/s)": (min(row["goodput_mbps"]), max(row["goodput_mbps"])),
            "windows faithful": float("nan")}))
    lines = [f"{'incast 6->1, queue over faithful windows':40}" + "".join(f"{name:>14}" for name, _ in columns)]
    for key in columns[0][1]:
        cells = []
        for _, values in columns:
            v = values[key]
            cells.append(f"{v[0]:6.2f}/{v[1]:<6.2f}" if isinstance(v, tuple) else (
                f"{'n/a':>13}" if v != v else f"{v:13.3f}" if key.startswith("Jain") else f"{v:13.1f}"))
        lines.append(f"{key:40}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--modes", default="advice,ecn,none,bbr")
    parser.add_argument("--no-tcp-state", action="store_true", help="do not sample the senders' TCP state")
    parser.add_argument("--reference", type=Path, help="results.json of experiments/reference/incast_ns3.py")
    parser.add_argument("--dataplane", choices=("soft", "bmv2"), default="soft")
    parser.add_argument("--capacity-mbps", type=float, default=None,
                        help="every link's rate (default: the topology's, 20 Mbit/s)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    results: dict[str, list[IncastResult]] = {m: [] for m in modes}
    header = (f"{'mode':7} {'run':>3} {'faith':>7} {'p99':>5} {'p90':>5} {'p99all':>5} {'drops':>6} "
              f"{'flagged':>7} {'jain':>6} {'util':>5}  drops in flagged windows (t: drops)")
    topo = leafspine() if args.capacity_mbps is None else leafspine(capacity_mbps=args.capacity_mbps)
    print(budget.estimate(topo, [(s, RECEIVER) for s in SENDERS], f"the {len(SENDERS)}->1 incast").line())
    with Testbed(topo, dataplane=args.dataplane, name=f"bench-incast-{args.dataplane}", mode=modes[0]) as tb:
        print(f"run directory {tb.run_dir}; {args.runs} runs per mode of {len(SENDERS)}→1 incast, "
              f"queue/drops over faithful 100 ms windows")
        print(header, flush=True)
        for i in range(1, args.runs + 1):
            for mode in modes:
                tb.set_mode(mode)
                if mode != "advice":  # no advice left in force
                    deadline = time.monotonic() + 10
                    while not pacing_cleared(tb) and time.monotonic() < deadline:
                        time.sleep(0.1)
                started = time.monotonic()
                result = run_incast(tb, mode, tag=f"-{mode}-{i}", tcp_state=not args.no_tcp_state)
                results[mode].append(result)
                print(row(i, result) + f"   ({time.monotonic() - started:.0f} s)", flush=True)
        port = tb.switch_stats(BOTTLENECK[0])["ports"][str(BOTTLENECK[1])]
        tcp_report(tb, results, port["ecn_threshold_pkts"], port["depth_pkts"])
    print("\n" + header)
    for mode in modes:
        for i, r in enumerate(results[mode], 1):
            print(row(i, r))
    for mode in modes:
        rs = results[mode]
        good = sum(1 for r in rs if r.p(0.99) <= P99_GOAL and r.drops_faithful == 0)
        share = sum(r.verdict.fraction for r in rs) / len(rs)
        drops = (f"drops faithful {sum(r.drops_faithful for r in rs)}, "
                 f"in flagged windows {sum(r.drops - r.drops_faithful for r in rs)}"
                 if all(r.drops_measured for r in rs) else "drops not measured (BMv2 counts them nowhere)")
        print(f"\n{mode}: {good} of {len(rs)} runs with faithful p99 queue <= {P99_GOAL} and 0 faithful drops; "
              f"mean faithful share {100 * share:.1f}%; {drops}")
    verdict = "n/a"
    if "advice" in results:
        rs = results["advice"]
        good = sum(1 for r in rs if r.p(0.99) <= P99_GOAL and r.drops_faithful == 0)
        unflagged = sum(r.drops_faithful for r in rs)
        met = good >= RUNS_GOAL * len(rs) and unflagged == 0
        verdict = "MET" if met else "NOT MET"
        if not all(r.drops_measured for r in rs):
            verdict += " (queue only: drops not measured on BMv2)"
        print(f"goal (advice): p99 <= {P99_GOAL} and 0 drops over faithful windows in >= {RUNS_GOAL:.0%} of runs, "
              f"every drop in a flagged window -> {good}/{len(rs)} runs, {unflagged} drops in faithful windows: "
              f"{verdict}")
    records = [r for r in read_records(tb.fidelity_path) if r.kind == "switch" and r.events]
    worst = sorted(r.max_late_ms for r in records)
    if worst:
        q = {p: worst[int(p * (len(worst) - 1))] for p in (0.5, 0.9, 0.99)}
        late = sum(1 for r in records if r.late_events)
        print(f"calibration: per-window worst lateness of the switches over the whole run ({len(worst)} windows "
              f"with frames): p50 {q[0.5]:.2f} ms, p90 {q[0.9]:.2f}, p99 {q[0.99]:.2f}, max {worst[-1]:.1f}; "
              f"{100 * late / len(worst):.1f}% of them above the {DEFAULT_TOLERANCE_MS:g} ms tolerance")
    reference = json.loads(args.reference.read_text()) if args.reference else None
    print("\n" + side_by_side(results, reference))
    out = tb.run_dir / "results.json"
    out.write_text(json.dumps({m: [r.summary() for r in rs] for m, rs in results.items()} | {"goal": verdict},
                              indent=1, default=str))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
