"""Run a scenario (lab/scenario.py): per control mode, the jobs and faults on schedule, then the
figures a report needs, all from what the run measured.

    python -m testbed scenario experiments/demo.yaml [--modes none,advice] [--short 0.5]

Each mode runs on a fresh testbed with its own run directory (runs/<time>-scenario-<name>-<mode>/, so
`make clean` finds what a dead run left); results.json and the report go to
runs/<time>-scenario-<name>/ (the CLI's `scenario FILE` runs the modes one after another on the
testbed that is up). Per mode:
every job in a thread from its start time (all-reduce through workloads.allreduce on fixed ports,
so every mode puts the same flows on the same ECMP paths; incast and
background flows through workloads.flows), faults from theirs, each host's sending rate sampled
from its switch port's counters every 200 ms (host-rates.csv), and at the end per switch port the
INT queue readings (telemetry.csv: p99 over all and over faithful windows), queue drops and bytes
sent (the soft switch's counters), and the fidelity verdict of the span.
"""

from __future__ import annotations

import csv
import math
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from emulation import budget
from emulation.faults import inject
from emulation.fidelity import Verdict
from emulation.net import Testbed, TestbedError
from emulation.nodes import nic_intf
from emulation.rundir import new_run_dir
from lab.report import write_report
from lab.results import JobRecord, ModeRun, PortFigures, ScenarioResult, write_results
from lab.scenario import JobSpecification, Scenario, ScenarioError, TimedFault
from topologies.spec import Topology
from wire import runfiles
from wire.runfiles import read_telemetry
from wire.stats import percentile
from workloads.allreduce.job import JobSpec, run_job
from workloads.command.job import CommandSpec, run_command
from workloads.fabric import FabricView, topology_order
from workloads.flows import schedule
from workloads.flows.job import run_flows

RATE_SAMPLE_S = 0.2
STATS_SETTLE_S = 0.7  # the soft switch writes its counters every 0.5 s
MIN_READINGS = 20  # a port with fewer INT readings in the span has no queue percentile
# Each all-reduce job's ranks take fixed TCP ports (PORT_BASE + PORT_RANGE * job index ...), so the
# same flows hash onto the same ECMP paths in every mode: a mode comparison is not an ECMP lottery.
PORT_BASE, PORT_RANGE = 20000, 100


Progress = Callable[[str], None]


def _print(text: str) -> None:
    print(time.strftime("[%H:%M:%S] ") + text, flush=True)


def run_scenario(scenario: Scenario, out_dir: Path | None = None, progress: Progress = _print) -> ScenarioResult:
    """Every mode of `scenario` on its own fresh testbed; results.json and the report in out_dir."""
    from lab.report import write_report  # plotting is the report's, after the runs

    out_dir = out_dir or new_run_dir(f"scenario-{scenario.name}")
    result = ScenarioResult(scenario, out_dir)
    (out_dir / "scenario.yaml").write_text(Path(scenario.source).read_text() if Path(scenario.source).exists()
                                           else "")
    progress(scenario_budget(scenario).line())
    for i, mode in enumerate(scenario.modes, 1):
        progress(f"mode {mode} ({i} of {len(scenario.modes)}): bringing up {scenario.topology.name} "
                 f"({scenario.dataplane})")
        with Testbed(scenario.topology, dataplane=scenario.dataplane, name=f"scenario-{scenario.name}-{mode}",
                     mode=mode) as tb:
            result.runs[mode] = run_mode(tb, scenario, mode, progress)
        write_results(result)
    write_report(result)
    progress(f"report: {out_dir / 'report.md'}")
    return result


def scenario_budget(scenario: Scenario) -> budget.Budget:
    """The CPU the scenario's jobs need at once (emulation/budget.py): all-reduce rings in topology
    order (tree and hd counted as rings), incast senders into their receiver, background flows
    between every pair of their hosts."""
    topo = scenario.topology
    flows: list[tuple[str, str]] = []
    for job in scenario.jobs:
        if job.kind in ("allreduce", "command"):  # a program's traffic is unknown: counted as a ring
            flows += budget.ring_flows(topology_order(topo, job.hosts))
        elif job.kind == "incast":
            flows += [(s, job.receiver) for s in job.senders]
        else:
            flows += [(a, b) for a in job.hosts for b in job.hosts if a != b]
    return budget.estimate(topo, flows, f"scenario {scenario.name}'s jobs at once")


def run_on_testbed(tb: Testbed, scenario: Scenario, progress: Progress = _print) -> ScenarioResult:
    """The scenario's modes one after another on the testbed that is up (the CLI's `scenario`); its
    topology must be the scenario's. The testbed is left in its mode from before."""


    if _shape(tb.topo) != _shape(scenario.topology):
        raise ScenarioError(f"{scenario.source}: topology: {scenario.topology.name} is not the running testbed's "
                            f"{tb.topo.name} (run it with `python -m testbed scenario FILE`, on fresh testbeds)")
    result = ScenarioResult(scenario, new_run_dir(f"scenario-{scenario.name}"))
    mode_before = tb.mode
    try:
        for mode in scenario.modes:
            progress(f"mode {mode} on the running testbed")
            result.runs[mode] = run_mode(tb, scenario, mode, progress, tag=f"-{result.out_dir.name}-{mode}")
            write_results(result)
    finally:
        if tb.mode != mode_before:
            tb.set_mode(mode_before)
    write_report(result)
    progress(f"report: {result.out_dir / 'report.md'}")
    return result


def _shape(topo: Topology) -> tuple:
    links = [(link.a, link.b, link.a_port, link.b_port, link.capacity_mbps, link.queue_pkts) for link in topo.links]
    return sorted(h.name for h in topo.hosts), sorted(links)


def run_mode(tb: Testbed, scenario: Scenario, mode: str, progress: Progress = _print, tag: str = "") -> ModeRun:
    """The scenario's schedule once on `tb` in `mode` (switched to it if needed)."""
    if tb.mode != mode:
        tb.set_mode(mode)
    view = FabricView.of_testbed(tb)
    before = _port_counters(tb)
    rates = HostRateSampler(tb, tb.run_dir / f"host-rates{tag}.csv")
    records = [JobRecord(j.name, j.kind, j.start_s) for j in scenario.jobs]
    start = time.monotonic() + 0.5
    t0 = tb.now() + 0.5
    rates.start()
    deadline = start + scenario.duration_s
    threads = [threading.Thread(target=_run_job, args=(job, record, view, start, deadline, scenario.seed, mode, tag,
                                                       progress, _port_base(job, i)),
                                name=f"job-{job.name}", daemon=True)
               for i, (job, record) in enumerate(zip(scenario.jobs, records, strict=True))]
    applied: list[dict] = []
    faults = threading.Thread(target=_apply_faults, args=(tb, scenario.faults, start, applied, progress),
                              name="faults", daemon=True)
    for thread in (*threads, faults):
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    for thread, record in zip(threads, records, strict=True):
        if thread.is_alive():
            record.error = f"unfinished after duration_s = {scenario.duration_s:g} s"
            progress(f"[{mode}] {record.name}: {record.error}")
    faults.join(max(0.0, deadline - time.monotonic()))
    t1 = tb.now()
    rates.stop()
    time.sleep(STATS_SETTLE_S)
    after = _port_counters(tb)
    verdict = tb.verdict(t0, t1)
    ports = _port_figures(tb, before, after, t0, t1, verdict)
    links = [r for r in tb.links_timeline() if t0 <= float(r["detected_wall"]) <= t1]
    run = ModeRun(mode, str(tb.run_dir), t0, t1, verdict.line(), verdict.fraction, records, ports, applied,
                  str(rates.path), links, dict(verdict.loop_worst))
    worst = run.worst_port()
    basis = "" if run.worst_basis == "faithful" else " (all windows: none faithful)"
    progress(f"[{mode}] done in {t1 - t0:.1f} s; worst port "
             f"{f'{worst.switch}:{worst.port} p99 {run.worst_p99():g}{basis}' if worst else 'n/a'}, "
             f"drops {run.drops if run.drops is not None else 'n/a'}; {verdict.line()}")
    return run


def _port_base(job: JobSpecification, index: int) -> int:
    """The ranks' first TCP port: the job's, the runner's fixed range for it, or 0 (ephemeral)."""
    if job.ports != "fixed":
        return 0
    return job.port_base or PORT_BASE + PORT_RANGE * index


def _run_job(job: JobSpecification, record: JobRecord, view: FabricView, start: float, deadline: float, seed: int,
             mode: str, tag: str, progress: Progress, port_base: int) -> None:
    time.sleep(max(0.0, start + job.start_s - time.monotonic()))
    record.started = time.time()
    name = f"{job.name}{tag}"

    def say(text: str) -> None:
        progress(f"[{mode}] {text}")

    try:
        if job.kind == "allreduce":
            outcome = run_job(JobSpec(hosts=job.hosts, sizes=[job.size_bytes], algo=job.algo, iters=job.iters,
                                      seed=seed, name=name, port_base=port_base), view, progress=say)
            size = outcome.results[0]
            record.figures = {"busbw_mbps": size.busbw_gbs * 8e3, "algbw_mbps": size.algbw_gbs * 8e3,
                              "time_s": size.time_s, "wrong": size.wrong, "algo": size.algo,
                              "link_mbps": outcome.link_mbps, "size_bytes": size.size_bytes}
            record.workdir = str(outcome.workdir)
            record.ok = size.wrong == 0
            if size.wrong:
                record.error = f"{size.wrong} wrong elements"
        elif job.kind == "command":
            # ended by its timeout, or when the scenario's duration_s is over, whichever comes first
            timeout_s = max(0.1, min(job.timeout_s, deadline - time.monotonic()))
            ran = run_command(CommandSpec(argv=job.command, hosts=job.hosts, name=name, timeout_s=timeout_s,
                                          env=job.env, master_port=job.master_port, launcher=job.launcher,
                                          mpi_args=job.mpi_args), view, progress=say)
            record.figures = {"status": ran.status, "elapsed_s": ran.elapsed_s, **ran.metrics}
            record.workdir = str(ran.workdir)
            record.ok = ran.ok
            if not ran.ok:
                record.error = ran.reason
        else:
            if job.kind == "incast":
                flows = schedule.incast(job.receiver, job.senders, job.size_bytes)
            elif job.kind == "pattern":
                flows = pattern_flows(job, view.topo, seed)
            else:
                flows = schedule.background(job.hosts, job.seconds, job.load, view.link_mbps(job.hosts), seed)
            flow_outcome = run_flows(flows, view, name=name, kind=job.kind, progress=say)
            done = [f for f in flow_outcome.flows if f.ok]
            fct = [f.fct_s * 1e3 for f in done]
            record.figures = {"flows": len(flow_outcome.flows), "completed": len(done),
                              "fct_p50_ms": percentile(fct, 50),
                              "fct_p99_ms": percentile(fct, 99),
                              "span_s": (max(f.ended for f in done) - min(f.started for f in done)) if done
                              else math.nan}
            if job.kind == "pattern" and done:
                # Hedera's figure: the flows' aggregate throughput against a non-blocking switch's
                link_mbps = view.link_mbps(job.hosts)
                ideal_mbps = sum(schedule.nonblocking_rates([(f.src, f.dst) for f in flows], link_mbps))
                record.figures["ideal_share"] = sum(f.goodput_mbps for f in done) / ideal_mbps
                record.figures["aggregate_mbps"] = sum(f.goodput_mbps for f in done)
            record.workdir = str(flow_outcome.workdir)
            record.ok = len(done) == len(flow_outcome.flows)
            if not record.ok:
                record.error = f"{len(flow_outcome.flows) - len(done)} flows did not complete"
    except Exception as exc:  # noqa: BLE001 - a failed job is a result of the run, reported, not fatal to it
        record.error = f"{type(exc).__name__}: {exc}"
        say(f"{job.name}: failed: {record.error}\n{traceback.format_exc(limit=3)}")
    record.ended = time.time()
    say(f"{job.name}: {'done' if record.ok else 'FAILED'} in {record.elapsed_s:.1f} s "
        + " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.figures.items()))


def pattern_flows(job: JobSpecification, topo: Topology, seed: int) -> list[schedule.Flow]:
    """A `pattern` job's flows (Hedera's patterns) for one seed, placed by `topo`'s edges and pods:
    the same flows whichever fabric then carries them (bench/paths.py runs them on a non-blocking
    switch too)."""
    places = {h: topo.edge_and_pod(h) for h in job.hosts}
    return schedule.hedera(job.pattern, job.hosts, {h: e for h, (e, _) in places.items()},
                           {h: p for h, (_, p) in places.items()}, job.size_bytes, seed, job.stride,
                           job.p_edge, job.p_pod)


def _apply_faults(tb: Testbed, faults: list[TimedFault], start: float, applied: list[dict],
                  progress: Progress) -> None:
    for timed in sorted(faults, key=lambda f: f.at_s):
        time.sleep(max(0.0, start + timed.at_s - time.monotonic()))
        fault = timed.fault
        if fault.kind == "flap":
            progress(f"fault: {fault.describe()} from {timed.at_s:g} s")
        try:
            injected = inject(tb, fault)
        except TestbedError as exc:  # reported with the run, which goes on without it
            applied.append({"at_s": timed.at_s, **fault.record(), "error": str(exc)})
            progress(f"fault: {exc}")
            continue
        applied.append({"at_s": timed.at_s, **fault.record(), "time": injected.began})
        progress(f"fault: {fault.describe()}{' done' if fault.kind == 'flap' else ''} at {timed.at_s:g} s")


def _port_counters(tb: Testbed) -> dict[tuple[str, int], tuple[int, int]]:
    """(switch, port) → (queue drops, bytes sent), soft switches only."""
    out = {}
    for name, sw in tb.switches.items():
        if sw.kind != "soft":
            continue
        try:
            ports = tb.switch_stats(name)["ports"]
        except (OSError, ValueError, KeyError):
            continue
        for port, stats in ports.items():
            out[(name, int(port))] = (int(stats["queue_drops"]), int(stats["tx_bytes"]))
    return out


def _port_figures(tb: Testbed, before: dict, after: dict, t0: float, t1: float,
                  verdict: Verdict) -> list[PortFigures]:
    readings: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for r in read_telemetry(tb.run_dir / runfiles.TELEMETRY, t0, t1):
        readings.setdefault((r.switch, r.port), []).append((r.time, r.queue_pkts))
    out = []
    for sw in tb.topo.switches:
        for link in tb.topo.links_of(sw.name):
            key = (sw.name, link.port_of(sw.name))
            rows = readings.get(key, [])
            faithful = [q for t, q in rows if verdict.is_faithful(t)]
            drops = utilisation = None
            if key in before and key in after:
                drops = after[key][0] - before[key][0]
                utilisation = (after[key][1] - before[key][1]) * 8 / max(t1 - t0, 1e-9) / (link.capacity_mbps * 1e6)
            out.append(PortFigures(sw.name, key[1], link.other(sw.name), len(rows),
                                   _p99([q for _, q in rows]), _p99(faithful), drops, utilisation))
    return out


def _p99(values: list[int]) -> float:
    if len(values) < MIN_READINGS:
        return math.nan
    return percentile(values, 99)


class HostRateSampler:
    """Each host's sending rate from its switch port's receive counter (root namespace), every 200 ms."""

    def __init__(self, tb: Testbed, path: Path) -> None:
        self.path = path
        self.counters = {}
        for host in tb.topo.hosts:
            self.counters[host.name] = Path(f"/sys/class/net/{nic_intf(tb.topo, host.name)}/statistics/rx_bytes")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="host-rates", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(2)

    def _read(self) -> dict[str, int]:
        out = {}
        for host, path in self.counters.items():
            try:
                out[host] = int(path.read_text())
            except (OSError, ValueError):
                continue
        return out

    def _run(self) -> None:
        with self.path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["time", "host", "tx_mbps"])
            last, last_t = self._read(), time.time()
            while not self.stopping.wait(RATE_SAMPLE_S):
                now, t = self._read(), time.time()
                for host, value in now.items():
                    if host in last:
                        writer.writerow([f"{t:.3f}", host, f"{(value - last[host]) * 8 / (t - last_t) / 1e6:.3f}"])
                last, last_t = now, t
