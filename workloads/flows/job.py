"""Run a flow schedule on a testbed's hosts (or on loopback) and report every flow's completion time.

    flows = incast("h5", ["h1", "h2", "h3", "h4"], 1 << 20)
    outcome = run_flows(flows, FabricView.of_testbed(tb), name="incast1", kind="incast")
    print(outcome.table)

An agent per host involved (workloads.flows.agent) sinks what is sent to it and sends its own flows
at t0 + start_s. Results go to the job directory: flows.csv (one row per flow) and results.json.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from emulation.rundir import new_run_dir
from wire.stats import jain_index, percentile
from workloads.fabric import FabricView
from workloads.flows.schedule import Flow
from workloads.hosts import BackgroundJob, Endpoint, JobError, LocalSpawner, ProcessGroup, Spawner, format_size

START_DELAY_S = 0.5  # between the plan going out and t0: every agent has it before its first flow
FLOW_TIMEOUT_S = 120.0
BUCKETS = ((0, 64 << 10), (64 << 10, 256 << 10), (256 << 10, 1 << 20), (1 << 20, 1 << 62))


@dataclass
class FlowResult:
    """One flow as measured: sender's times (CLOCK_MONOTONIC, s) and the receiver's byte count."""

    id: int
    src: str
    dst: str
    size_bytes: int
    start_s: float  # scheduled, after t0
    started: float = float("nan")
    ended: float = float("nan")
    received_bytes: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.received_bytes == self.size_bytes

    @property
    def fct_s(self) -> float:
        return self.ended - self.started

    @property
    def goodput_mbps(self) -> float:
        return self.size_bytes * 8 / self.fct_s / 1e6 if self.ok and self.fct_s > 0 else 0.0


@dataclass
class FlowOutcome:
    name: str
    kind: str  # incast | background
    hosts: list[str]
    workdir: Path
    t0: float
    flows: list[FlowResult] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return sum(f.ok for f in self.flows)

    @property
    def failed(self) -> list[FlowResult]:
        return [f for f in self.flows if not f.ok]

    @property
    def table(self) -> str:
        return format_incast(self) if self.kind == "incast" else format_background(self)

    def summary(self) -> str:
        done = [f for f in self.flows if f.ok]
        fct = np.array([f.fct_s * 1e3 for f in done]) if done else np.array([float("nan")])
        p50, p99 = percentile(fct, 50), percentile(fct, 99)
        return (f"{self.name}: done, {self.kind}, {self.completed} of {len(self.flows)} flows completed, FCT p50 "
                f"{p50:.0f} ms p99 {p99:.0f} ms ({self.workdir})")


def format_incast(outcome: FlowOutcome) -> str:
    lines = [f"# {'flow':>16} {'size (B)':>10} {'FCT (ms)':>9} {'goodput (Mbit/s)':>17}"]
    for f in sorted(outcome.flows, key=lambda f: f.src):
        fct = f"{f.fct_s * 1e3:9.0f}" if f.ok else f"{'failed':>9}"
        lines.append(f"  {f.src + ' -> ' + f.dst:>16} {f.size_bytes:>10} {fct} {f.goodput_mbps:>17.2f}"
                     + (f"  {f.error}" if f.error else ""))
    done = [f for f in outcome.flows if f.ok]
    if done:
        span = max(f.ended for f in done) - min(f.started for f in done)
        total = sum(f.size_bytes for f in done) * 8 / span / 1e6
        lines.append(f"# incast: {len(done)} of {len(outcome.flows)} senders -> {outcome.flows[0].dst} in "
                     f"{span * 1e3:.0f} ms, aggregate {total:.2f} Mbit/s, "
                     f"Jain fairness {jain_index([f.goodput_mbps for f in done]):.3f}")
    return "\n".join(lines)


def format_background(outcome: FlowOutcome) -> str:
    lines = [f"# {'size (B)':>12} {'flows':>6} {'failed':>6} {'FCT p50':>8} {'FCT p99':>8} {'goodput p50':>12}",
             f"# {'':>12} {'':>6} {'':>6} {'(ms)':>8} {'(ms)':>8} {'(Mbit/s)':>12}"]
    for lo, hi in BUCKETS:
        group = [f for f in outcome.flows if lo <= f.size_bytes < hi]
        if not group:
            continue
        done = [f for f in group if f.ok]
        label = f"<{format_size(hi)}" if not lo else f">={format_size(lo)}" if hi >= 1 << 62 else \
            f"{format_size(lo)}-{format_size(hi)}"
        if done:
            fct = np.array([f.fct_s * 1e3 for f in done])
            good = np.array([f.goodput_mbps for f in done])
            stats = f"{percentile(fct, 50):8.0f} {percentile(fct, 99):8.0f} {percentile(good, 50):12.2f}"
        else:
            stats = f"{'-':>8} {'-':>8} {'-':>12}"
        lines.append(f"  {label:>12} {len(group):>6} {len(group) - len(done):>6} {stats}")
    lines.append(f"# {outcome.completed} of {len(outcome.flows)} flows completed on {len(outcome.hosts)} hosts")
    return "\n".join(lines)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_flows(flows: list[Flow], view: FabricView | None = None, name: str = "flows", kind: str = "background",
              local: bool = False, cc: str | None = None, progress: Callable[[str], None] | None = _stderr,
              workdir: Path | None = None) -> FlowOutcome:
    """Run `flows` (host names of the testbed behind `view`; with local, any names, all on loopback)
    and write flows.csv and results.json to the job's directory (runs/<run>/jobs/<name>/)."""
    if not flows:
        raise JobError(f"job {name}: no flows to run (raise the load or the duration)")
    hosts = sorted({f.src for f in flows} | {f.dst for f in flows})
    spawner: Spawner
    if local:
        endpoints = [Endpoint(h, "127.0.0.1") for h in hosts]
        spawner, workdir = LocalSpawner(), workdir or new_run_dir(f"flows-{name}")
    else:
        view = view or FabricView.of_run_dir()
        endpoints = view.endpoints(hosts, order="given")
        workdir = workdir or view.job_dir(name)
        spawner = view.spawner(workdir.name)
    horizon = max(f.start_s for f in flows)
    group = ProcessGroup(endpoints, spawner, workdir, name, kind="agent", timeout_s=horizon + FLOW_TIMEOUT_S)

    def argv(index: int, ep: Endpoint, control: Path) -> list[str]:
        out = [sys.executable, "-m", "workloads.flows.agent", "--control", str(control), "--index", str(index),
               "--ip", ep.ip, "--timeout-s", str(FLOW_TIMEOUT_S), "--log-file", str(group.log_path(index))]
        return out + (["--cc", cc] if cc else [])

    results = {f.id: FlowResult(f.id, f.src, f.dst, f.size_bytes, f.start_s) for f in flows}
    if len(results) != len(flows):
        raise JobError(f"job {name}: flow ids repeat")
    hellos = group.start(argv)
    try:
        peers = {ep.name: [ep.ip, hello["port"]] for ep, hello in zip(endpoints, hellos, strict=True)}
        t0 = time.monotonic() + START_DELAY_S
        for index, ep in enumerate(endpoints):
            own = [f.to_dict() for f in flows if f.src == ep.name]
            group.send(index, {"plan": {"t0": t0, "peers": peers, "flows": own}})
        if progress:
            progress(f"{name}: {len(flows)} {kind} flows on {len(hosts)} hosts over {horizon:.1f} s")
        for index, ep in enumerate(endpoints):
            for row in group.expect(index, "sent")["sent"]:
                r = results[row["id"]]
                r.started, r.ended, r.error = row["started"], row["ended"], row.get("error", "")
            if progress:
                done = sum(r.src == ep.name and not np.isnan(r.ended) for r in results.values())
                progress(f"{name}: {ep.name} has sent its {done} flows")
        group.broadcast({"report": 1})
        for index in range(len(endpoints)):
            for row in group.expect(index, "received")["received"]:
                if "id" in row and row["id"] in results:
                    results[row["id"]].received_bytes = row["bytes"]
    finally:
        group.close()
    outcome = FlowOutcome(name, kind, hosts, workdir, t0, sorted(results.values(), key=lambda r: r.id))
    write_results(outcome)
    return outcome


def write_results(outcome: FlowOutcome) -> None:
    rows = [{**asdict(f), "fct_ms": round(f.fct_s * 1e3, 3) if f.ok else "", "goodput_mbps": round(f.goodput_mbps, 3),
             "ok": f.ok} for f in outcome.flows]
    with (outcome.workdir / "flows.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = {"job": outcome.name, "kind": outcome.kind, "hosts": outcome.hosts, "t0": outcome.t0,
            "completed": outcome.completed, "flows": rows}
    (outcome.workdir / "results.json").write_text(json.dumps(meta, indent=1))
    (outcome.workdir / "results.txt").write_text(outcome.table + "\n")


def background_job(name: str, flows: list[Flow], view: FabricView, kind: str, cc: str | None = None) -> BackgroundJob:
    """The flow job as the CLI runs it (foreground or background), described by `jobs`."""

    def describe(outcome: object, full: bool = False) -> str:
        assert isinstance(outcome, FlowOutcome)
        return (outcome.table + "\n" + outcome.summary()) if full else outcome.summary()

    return BackgroundJob(name, lambda progress: run_flows(flows, view, name=name, kind=kind, cc=cc, progress=progress),
                         describe)
