"""The report of a scenario run: report.md with the modes side by side, and its plots (PNG).

Everything in it is read from the run: the jobs' results, the INT queue readings (telemetry.csv),
the switches' counters, advice.csv and the host agents' records, the sampled host rates, and each
mode's fidelity verdict.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from emulation.faults import Fault
from emulation.rundir import RUNS
from lab.results import ModeRun, ScenarioResult
from wire import runfiles
from wire.runfiles import read_rows, read_telemetry

TABLE_START = "<!-- table -->"
TABLE_END = "<!-- /table -->"


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def first_table(result: ScenarioResult) -> str:
    """Per job busbw / completion time, then the fabric's p99 queue, drops, utilisation, fidelity;
    a column per mode and advice/none when both ran."""
    runs = result.runs
    modes = list(runs)
    roles = {s.name: s.role for s in result.scenario.topology.switches}
    ratio = "advice" in runs and "none" in runs
    rows: list[tuple[str, list[float | None], int]] = []
    for job in result.scenario.jobs:
        records = [next(r for r in runs[m].jobs if r.name == job.name) for m in modes]
        if job.kind == "allreduce":
            rows.append((f"{job.name}: busbw (Mbit/s)", [r.figures.get("busbw_mbps") for r in records], 2))
            rows.append((f"{job.name}: job completion time (s)", [r.elapsed_s for r in records], 1))
        elif job.kind == "incast":
            rows.append((f"{job.name}: incast completion (s)", [r.figures.get("span_s") for r in records], 2))
        elif job.kind == "command":
            rows.append((f"{job.name}: job completion time (s)", [r.elapsed_s if r.ok else None for r in records], 1))
            keys = sorted({k.removesuffix("_p50") for r in records for k in r.figures if k.endswith("_p50")})
            for key in keys:
                for q in ("p50", "p99"):
                    rows.append((f"{job.name}: {key} {q}", [r.figures.get(f"{key}_{q}") for r in records], 3))
        elif job.kind == "pattern":
            shares = [r.figures.get("ideal_share") for r in records]
            rows.append((f"{job.name}: share of the non-blocking ideal", shares, 2))
            rows.append((f"{job.name}: flow completion p99 (ms)", [r.figures.get("fct_p99_ms") for r in records], 0))
        else:
            rows.append((f"{job.name}: flow completion p99 (ms)", [r.figures.get("fct_p99_ms") for r in records], 0))
    worst = [runs[m].worst_port() for m in modes]
    unfaithful = [m for m in modes if runs[m].worst_basis == "all"]
    rows.append(("p99 queue, worst port, faithful windows (pkts)" + (
                 f" ({', '.join(unfaithful)}: all windows, none faithful)" if unfaithful else ""),
                 [runs[m].worst_p99() for m in modes], 0))
    drops = [runs[m].drops for m in modes]
    rows.append(("drops, all switch ports", [float(d) if d is not None else None for d in drops], 0))
    rows.append(("utilisation of leaf→spine ports", [runs[m].uplink_utilisation(roles) for m in modes], 2))
    rows.append(("windows faithful (%)", [100 * runs[m].faithful_share for m in modes], 0))
    header = "| | " + " | ".join(modes) + (" | advice / none |" if ratio else " |")
    lines = [header, "|---" * (len(modes) + 1 + ratio) + "|"]
    for label, values, digits in rows:
        cells = [_fmt(v, digits) for v in values]
        if ratio:
            a, n = values[modes.index("advice")], values[modes.index("none")]
            cells.append(f"{a / n:.2f}×" if a is not None and n and not math.isnan(a) and not math.isnan(n) else "n/a")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    ports = ", ".join(f"{m}: {w.switch}:{w.port}→{w.peer}" for m, w in zip(modes, worst, strict=True) if w)
    lines.append("")
    lines.append(f"Worst port per mode (highest p99 queue over faithful windows): {ports or 'none (no INT readings)'}.")
    return "\n".join(lines)


def write_report(result: ScenarioResult) -> Path:
    sc = result.scenario
    out = result.out_dir
    plots = _plots(result)
    lines = [f"# Scenario {sc.name}", "",
             f"{sc.topology.name} ({len(sc.topology.hosts)} hosts), data plane {sc.dataplane}, seed {sc.seed}, "
             f"from `{sc.source}`. Modes run one after another, each on a fresh testbed with the same schedule.",
             "", TABLE_START, first_table(result), TABLE_END, "", "## Fidelity", ""]
    for mode, run in result.runs.items():
        lines.append(f"- {mode}: {run.verdict} (`{run.run_dir}`)")
    lines += ["", "## Replay", "", "Each mode's run on the live page (links, queues, suspects, advice and faults "
              "as they were; README: Live page), what its files say at the run's end, and whether the "
              "replay's last frame shows the same:", ""]
    for mode, run in result.runs.items():
        lines.append(f"- {mode}: `python -m testbed replay {run.run_dir}`")
        lines += [f"  - {line}" for line in end_of_run_lines(Path(run.run_dir), len(sc.topology.links))]
    lines += ["", "## Jobs", ""]
    for mode, run in result.runs.items():
        for r in run.jobs:
            status = "ok" if r.ok else f"FAILED ({r.error})"
            figures = ", ".join(f"{k} {_fmt(v, 2) if isinstance(v, float) else v}" for k, v in r.figures.items())
            lines.append(f"- {mode} / {r.name} ({r.kind}, from {r.start_s:g} s): {status}; {figures}")
    if any(run.faults for run in result.runs.values()):
        lines += ["", "## Faults and the controller's response", ""]
        for mode, run in result.runs.items():
            for fault in run.faults:
                lines.append(f"- {mode}: {fault_text(fault)}")
            for row in run.links:
                advice = f", advice after {row['advice_decided_ms']} ms" if row.get("advice_decided_ms") else ""
                lines.append(f"  - {float(row['detected_wall']) - run.t0:.2f} s: controller: {row['link']} "
                             f"{row['state']}, {row['route_updates']} route updates in {row['routes_written_ms']} ms"
                             f"{advice}")
    lines += ["", "## Plots", ""]
    for title, path in plots:
        lines += [f"### {title}", "", f"![{title}]({path.name})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


Ranking = list[tuple[str, str, float, bool]]  # the localiser's suspects in order: target, fault, score, alert
SHOWN_SUSPECTS = 5  # of the last ranking, in the report


def end_of_run(run_dir: Path) -> tuple[Ranking, list[frozenset[str]]]:
    """The localiser's last ranking (suspects.csv) and the links down at the end (links.csv: each
    link's last state), as the run's files have them."""
    rankings = runfiles.read_suspects(run_dir)
    ranking = [(target, fault, score, alert) for target, fault, score, alert, _ in rankings[-1][1]] if rankings else []
    last: dict[frozenset[str], str] = {}
    for row in read_rows(run_dir / runfiles.LINKS):
        a, _, b = row.get("link", "").partition("-")
        if a and b:
            last[frozenset((a, b))] = row.get("state", "")
    return ranking, sorted((link for link, state in last.items() if state != "up"), key=sorted)


def replayed_end(run_dir: Path) -> tuple[Ranking, list[frozenset[str]]] | str:
    """What the live page's replay (controller/replay.py) shows at the run's end: the suspects and the
    links down; a string saying why when the run cannot be replayed."""
    from controller.replay import Replay, RunNotReplayable  # the report of a run without one draws no page

    try:
        replay = Replay(run_dir)
    except RunNotReplayable as exc:
        return str(exc)
    state = replay.state(replay.t1)
    return ([(s.target, s.fault, s.score, s.alert) for s in state.suspects],
            sorted((frozenset(link) for link, up in state.links.items() if not up), key=sorted))


def end_of_run_lines(run_dir: Path, links: int) -> list[str]:
    """The report's lines on a run's end state and on its replay's agreement with it."""
    ranking, down = end_of_run(run_dir)
    named = ", ".join("-".join(sorted(link)) for link in down)
    lines = [f"links at the end: {f'{len(down)} down ({named})' if down else f'all {links} up'}"]
    shown = "; ".join(f"{i}. {target}: {fault} {score:.2f}{' (alert)' if alert else ''}"
                      for i, (target, fault, score, alert) in enumerate(ranking[:SHOWN_SUSPECTS], 1))
    more = f" and {len(ranking) - SHOWN_SUSPECTS} more" if len(ranking) > SHOWN_SUSPECTS else ""
    lines.append(f"the localiser's suspects at the end: {shown + more if ranking else 'none'}")
    replayed = replayed_end(run_dir)
    if isinstance(replayed, str):
        lines.append(f"replay: cannot play this run back ({replayed})")
    elif replayed == (ranking, down):
        lines.append("replay: its last frame shows the same suspects and link states")
    else:
        lines.append(f"replay: its last frame DIFFERS: suspects {replayed[0]}, links down "
                     f"{['-'.join(sorted(link)) for link in replayed[1]]}")
    return lines


def fault_text(fault: dict) -> str:
    """One applied fault (lab/experiment.py's record) in words."""
    a, b = fault["link"]
    if "error" in fault:
        return f"{fault['kind']} {a} -> {b} not applied: {fault['error']} at {fault['at_s']:g} s"
    return f"{Fault.from_record(fault).describe()} at {fault['at_s']:g} s"


def last_report(runs: Path = RUNS) -> Path | None:
    found = sorted(runs.glob("*/report.md"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def report_table(path: Path) -> str:
    text = path.read_text()
    if TABLE_START in text and TABLE_END in text:
        return text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    return text


def _plots(result: ScenarioResult) -> list[tuple[str, Path]]:
    """Every plot of the report, drawn and saved beside it: (title, PNG)."""
    import matplotlib  # only when a report is drawn: importing it costs ~0.5 s

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    topo = result.scenario.topology
    capacity = {(s.name, link.port_of(s.name)): link for s in topo.switches for link in topo.links_of(s.name)}
    out = [("Queues", _save(_queues_plot(result, capacity, plt), result.out_dir / "queues.png", plt))]
    if "advice" in result.runs:
        out.append(("Advised vs achieved rates",
                    _save(_rates_plot(result.runs["advice"], plt), result.out_dir / "rates-advice.png", plt)))
    roles = {s.name: s.role for s in topo.switches}
    uplinks = {k for k, link in capacity.items()
               if roles.get(k[0]) == "leaf" and roles.get(link.other(k[0])) == "spine"}
    if uplinks:
        out.append(("Uplink utilisation",
                    _save(_utilisation_plot(result, uplinks, plt), result.out_dir / "utilisation.png", plt)))
    jobs = [j.name for j in result.scenario.jobs if j.kind == "allreduce"]
    if jobs:
        out.append(("busbw per mode", _save(_busbw_plot(result, jobs, plt), result.out_dir / "busbw.png", plt)))
    return out


def _queues_plot(result: ScenarioResult, capacity: dict, plt: Any) -> Any:
    """Queue over time at the worst ports, per mode, with the ECN threshold (a quarter of the queue).
    Every reading is drawn; a mode's title gives its faithful share, and an unfaithful run still
    gets its plot (ranked over all windows), labelled so."""
    runs = result.runs
    worst = {m: r.worst_port() for m, r in runs.items()}
    watched = sorted({(w.switch, w.port) for w in worst.values() if w})
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.6 * len(runs)), sharex=True, squeeze=False)
    for ax, (mode, run) in zip(axes[:, 0], runs.items(), strict=True):
        rows = read_telemetry(Path(run.run_dir) / runfiles.TELEMETRY, run.t0, run.t1)
        for sw, port in watched:
            pts = [(r.time - run.t0, r.queue_pkts) for r in rows if (r.switch, r.port) == (sw, port)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", ms=2, label=f"{sw}:{port}")
        if watched:
            link = capacity[watched[0]]
            ax.axhline(link.queue_pkts // 4, color="tab:orange", ls="--", lw=1, label="ECN threshold")
            ax.set_ylim(0, link.queue_pkts + 2)
            ax.legend(loc="upper right", fontsize=7, ncol=4)
        else:
            _no_data(ax, "no INT queue readings in this run")
        ax.set_title(f"{mode}: all windows drawn, {100 * run.faithful_share:.0f}% of them faithful"
                     + ("" if run.worst_basis == "faithful" else " (worst port ranked over all windows)"), fontsize=8)
        ax.set_ylabel(f"{mode}\nqueue (pkts)")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds into the mode's run")
    fig.suptitle("INT queue readings at the worst ports")
    fig.tight_layout()
    return fig


def _rates_plot(run: ModeRun, plt: Any) -> Any:
    """Advised vs achieved rate per host (the advice mode)."""
    run_dir = Path(run.run_dir)
    rates = [r for r in read_rows(Path(run.host_rates)) if run.t0 <= float(r["time"]) < run.t1]
    hosts = sorted({r["host"] for r in rates if float(r["tx_mbps"]) > 0.05}, key=lambda h: int(h[1:]))
    if not hosts:
        fig, ax = plt.subplots(figsize=(11, 1.5))
        _no_data(ax, "no host sent in the advice run")
        return fig
    fig, axes = plt.subplots(len(hosts), 1, figsize=(11, 1.5 * len(hosts)), sharex=True, squeeze=False)
    for ax, host in zip(axes[:, 0], hosts, strict=True):
        achieved = [(float(r["time"]) - run.t0, float(r["tx_mbps"])) for r in rates if r["host"] == host]
        ax.plot([p[0] for p in achieved], [p[1] for p in achieved], lw=0.8, label="achieved (all destinations)")
        advised = _advised_total(run_dir, host, run.t0, run.t1)
        if advised:
            ax.step([p[0] for p in advised], [p[1] for p in advised], where="post", lw=0.8,
                    label="advised (sum over destinations)")
        ax.set_ylabel(f"{host}\nMbit/s", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("seconds into the advice run")
    fig.suptitle("Advised and achieved sending rate per host (advice mode)")
    fig.tight_layout()
    return fig


def _utilisation_plot(result: ScenarioResult, uplinks: set[tuple[str, int]], plt: Any) -> Any:
    """Utilisation of the leaf→spine ports over time (INT tx rate / capacity), per mode."""
    fig, ax = plt.subplots(figsize=(11, 3.2))
    for mode, run in result.runs.items():
        readings = [(r.time - run.t0, r.utilisation) for r in
                    read_telemetry(Path(run.run_dir) / runfiles.TELEMETRY, run.t0, run.t1)
                    if (r.switch, r.port) in uplinks and r.utilisation is not None]
        if readings:
            t = [time for time, _ in readings]
            u = [float(util or 0.0) for _, util in readings]
            bins = max(1, int(max(t) / 0.5))
            sums, edges = _binned_mean(t, u, bins)
            ax.plot(edges, sums, lw=1, label=mode)
    ax.set_ylabel("mean utilisation")
    ax.set_xlabel("seconds into the mode's run")
    ax.set_ylim(0, 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Leaf→spine ports: utilisation from INT (0.5 s bins)")
    fig.tight_layout()
    return fig


def _busbw_plot(result: ScenarioResult, jobs: list[str], plt: Any) -> Any:
    """busbw per all-reduce job per mode."""
    runs = result.runs
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / max(1, len(runs))
    for i, (mode, run) in enumerate(runs.items()):
        values = [next(r for r in run.jobs if r.name == j).figures.get("busbw_mbps", 0.0) for j in jobs]
        ax.bar([k + i * width for k in range(len(jobs))], values, width, label=mode)
    ax.set_xticks([k + width * (len(runs) - 1) / 2 for k in range(len(jobs))], jobs)
    ax.set_ylabel("busbw (Mbit/s)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    ax.set_title("All-reduce bus bandwidth per mode")
    fig.tight_layout()
    return fig


def _no_data(ax: Any, text: str) -> None:  # a matplotlib Axes
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def _binned_mean(t: list[float], v: list[float], bins: int) -> tuple[list[float], list[float]]:
    top = max(t) if t else 1.0
    sums = [0.0] * bins
    counts = [0] * bins
    for x, y in zip(t, v, strict=True):
        i = min(bins - 1, int(x / top * bins))
        sums[i] += y
        counts[i] += 1
    centres = [(i + 0.5) * top / bins for i in range(bins)]
    pairs = [(c, s / n) for c, s, n in zip(centres, sums, counts, strict=True) if n]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _advised_total(run_dir: Path, host: str, t0: float, t1: float) -> list[tuple[float, float]]:
    """The host's applied advice (sum over destinations, Mbit/s) as steps, from its agent's record."""
    rows = read_rows(run_dir / runfiles.HOSTAGENTS / f"{host}.csv")
    current: dict[str, float] = {}
    steps = []
    for r in rows:
        t = float(r["applied"])
        current[r["dst"]] = float(r["rate_bps"]) / 1e6
        if t0 <= t < t1:
            steps.append((t - t0, sum(current.values())))
    return steps


def _save(fig: Any, path: Path, plt: Any) -> Path:  # matplotlib's figure and pyplot
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
