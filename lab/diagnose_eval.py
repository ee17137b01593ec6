"""Evaluate fault localisation (controller/localizer.py) on the default fabric under all-reduce load.

    python -m testbed diagnose-eval [--trials 60] [--no-fault 10] [--seed 1] [--kinds down,loss,rate,delay,host]
                                    [--dataplane soft|bmv2] [--topo leafspine|railopt:servers=2,gpus=4]

One leaf-spine testbed (soft switch, or BMv2 without the delay kind; mode none); an 8-rank ring
all-reduce over every host, its ranks interleaved across the leaves, run in a loop so every fabric
link carries traffic both ways; its ranks report their step timings to the controller. On multi-GPU
servers (railopt), a hier all-reduce over every GPU instead, and the kinds of a GPU node (Lingjing's
answer): nic (the leaf's port toward a GPU at half rate), gpu (a slow GPU), nvlink (a GPU's NVLink at
a quarter of its rate), rail (a rail's leaf holding frames). Each trial:
a quiet period (an alert then is a false alarm), the fault injected at a seeded random place (a
fabric link, one direction of it, a switch, or a host whose ranks compute slowly), the
controller's Diagnose polled every 250 ms until its top alert is the truth (and holds) or
`timeout_s` passes, the fault cleared, and the fabric left to recover. No-fault trials watch as
long without injecting anything.

Per fault kind and overall: top-1 accuracy (the top alert at the end names the faulty link,
switch or host), precision (alerts naming the truth among all alerts raised in fault and no-fault windows),
recall (trials with any alert naming the truth), false alarms (no-fault trials with an alert) and
the median time from onset to a correct top-1. Results: diagnose-eval.md and .json in the run
directory.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from controller.localizer import Localizer
from emulation.faults import Fault, inject
from emulation.net import Testbed
from topologies import leafspine
from topologies.spec import Topology
from wire import advice_pb2 as pb
from wire.adviceclient import diagnose
from workloads.allreduce.job import JobSpec, run_job
from workloads.fabric import FabricView

KINDS = ("down", "loss", "rate", "delay", "host")
# On multi-GPU servers (railopt): a GPU's NIC at half rate, a slow GPU, a degraded NVLink, a rail's
# leaf holding frames; what they are named is what the localiser must name (Lingjing's GPU node).
SERVER_KINDS = ("nic", "gpu", "nvlink", "rail")
NVLINK_SHARE = 0.25  # a degraded NVLink runs at a quarter of its rate (a link trained down to fewer lanes)
LOSS_PERCENTS = (2.0, 5.0, 20.0)
RATE_SHARE = 0.5  # a slow port drains at half its capacity
DELAY_MS = 5.0
HOST_DELAYS_MS = (10.0, 20.0, 40.0)  # a slow host's ranks take this much longer over every piece (~100 ms)
POLL_S = 0.25
HOLD_POLLS = 2  # a correct top-1 must hold this many polls to end a trial early
RINGS = 1  # all-reduce rings in the load (the second, if any, in the opposite order)


@dataclass
class Trial:
    index: int
    kind: str  # down | loss | rate | delay | host | nic | gpu | nvlink | rail | none
    where: str  # what was done, e.g. "loss 5% s1 -> s3"
    truth: str  # "link s1-s3", "switch s3", "host h3", "" (no fault)
    quiet_alerts: list[str] = field(default_factory=list)  # alerts before the fault: false alarms
    alerts: list[str] = field(default_factory=list)  # alerts raised after the onset, in order
    top1: str = ""  # the top alert when the trial ended
    seconds_to_top1: float | None = None  # onset → first poll whose top alert was the truth

    @property
    def correct(self) -> bool:
        return bool(self.truth) and self.top1 == self.truth


def fabric_links(tb: Testbed) -> list[tuple[str, str]]:
    return sorted((link.a, link.b) for link in tb.topo.links if tb.topo.is_switch(link.a) and tb.topo.is_switch(link.b))


def plan_trials(tb: Testbed, count: int, no_fault: int, kinds: tuple[str, ...], seed: int) -> list[Trial]:
    """Fault trials spread evenly over the kinds, places drawn with `seed`, and the no-fault trials,
    shuffled together."""
    rng = random.Random(seed)
    links = fabric_links(tb)
    switches = [s.name for s in tb.topo.switches]
    hosts = [h.name for h in tb.topo.hosts]
    trials = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        a, b = rng.choice(links)
        if rng.random() < 0.5:
            a, b = b, a
        link = f"link {'-'.join(sorted((a, b)))}"
        if kind in SERVER_KINDS:
            trials.append(server_trial(tb, kind, rng))
        elif kind == "down":
            trials.append(Trial(0, kind, f"down {a}-{b}", link))
        elif kind == "loss":
            trials.append(Trial(0, kind, f"loss {rng.choice(LOSS_PERCENTS):g}% {a} -> {b}", link))
        elif kind == "rate":
            trials.append(Trial(0, kind, f"rate {a} -> {b} at {100 * RATE_SHARE:g}%", link))
        elif kind == "host":
            host = rng.choice(hosts)
            trials.append(Trial(0, kind, f"slow {host} {rng.choice(HOST_DELAYS_MS):g} ms", f"host {host}"))
        else:
            switch = rng.choice(switches)
            trials.append(Trial(0, kind, f"delay {switch} {DELAY_MS:g} ms", f"switch {switch}"))
    trials += [Trial(0, "none", "no fault", "") for _ in range(no_fault)]
    rng.shuffle(trials)
    for i, t in enumerate(trials):
        t.index = i + 1
    return trials


def server_trial(tb: Testbed, kind: str, rng: random.Random) -> Trial:
    """A trial of a multi-GPU server's kinds at a GPU (or a rail) drawn with rng."""
    gpus = [gpu for server in tb.topo.servers for gpu in server.gpus]
    if not gpus:
        raise ValueError(f"fault kind {kind}: {tb.topo.name} has no multi-GPU servers")
    gpu = rng.choice(gpus)
    leaf = tb.topo.host_link(gpu).other(gpu)
    server = tb.topo.server_of(gpu)
    assert server is not None
    if kind == "nic":  # what the GPU receives through its NIC, at half rate: the leaf's port toward it
        return Trial(0, kind, f"rate {leaf} -> {gpu} at {100 * RATE_SHARE:g}%", Localizer.link_target(gpu, leaf))
    if kind == "gpu":
        return Trial(0, kind, f"slow {gpu} {rng.choice(HOST_DELAYS_MS):g} ms", f"host {gpu}")
    if kind == "nvlink":
        return Trial(0, kind, f"nvlink {gpu} {server.name} at {100 * NVLINK_SHARE:g}%",
                     Localizer.link_target(gpu, server.name))
    return Trial(0, kind, f"delay {leaf} {DELAY_MS:g} ms", f"switch {leaf}")  # a rail: its leaf holds frames


def trial_fault(tb: Testbed, trial: Trial, on: bool) -> Fault:
    """The fault that injects (on) or clears the trial's."""
    words = trial.where.split()
    if trial.kind == "down":
        a, b = words[1].split("-")
        return Fault("link_down" if on else "link_up", (a, b))
    if trial.kind == "loss":
        return Fault("loss", (words[2], words[4]), percent=float(words[1].rstrip("%")) if on else 0.0)
    if trial.kind in ("rate", "nic"):
        a, b = words[1], words[3]
        return Fault("rate", (a, b), mbps=tb.topo.find_link(a, b).capacity_mbps * RATE_SHARE if on else 0.0)
    if trial.kind == "nvlink":
        gpu, server = words[1], words[2]
        return Fault("rate", (gpu, server), mbps=tb.topo.nvlink_mbps(gpu) * NVLINK_SHARE if on else 0.0)
    if trial.kind in ("delay", "rail"):
        return Fault("delay", (words[1], words[1]), delay_ms=DELAY_MS if on else 0.0)
    return Fault("delay", (words[1], words[1]), delay_ms=float(words[2]) if on else 0.0)  # a slow host


def apply(tb: Testbed, trial: Trial, on: bool) -> None:
    """Inject (on) or clear the trial's fault."""
    inject(tb, trial_fault(tb, trial, on))


class Load:
    """Ring all-reduces over every host (RINGS of them, the second in the opposite order), in a loop
    until stopped; on multi-GPU servers, hier all-reduces over every GPU (NVLink and rails both busy)."""

    def __init__(self, tb: Testbed) -> None:
        leaves: dict[str, list[str]] = {}
        for h in tb.topo.hosts:
            leaves.setdefault(tb.topo.neighbours(h.name)[0][0], []).append(h.name)
        columns = list(leaves.values())
        interleaved = [h for group in zip(*columns, strict=False) for h in group]  # every hop crosses leaves
        self.orders = [interleaved, interleaved[::-1]]
        self.algo, self.order = "ring", "given"
        if tb.topo.servers:
            self.orders = [[h.name for h in tb.topo.hosts]] * 2
            self.algo, self.order = "hier", "topology"
        self.view = FabricView.of_testbed(tb)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(RINGS)]

    def _loop(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            spec = JobSpec(hosts=self.orders[i], sizes=[2 << 20], algo=self.algo, iters=10, warmup=0, order=self.order,
                           name=f"load{i}-{n}", port_base=24000 + 200 * i, declare=False)
            try:
                run_job(spec, self.view, progress=None)
            except Exception as exc:  # noqa: BLE001 - a job broken by a fault is expected; the loop goes on
                self.errors.append(f"{spec.name}: {exc}")

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(180)


def top_alert(d: pb.Diagnosis) -> str:
    alerting = [s for s in d.suspects if s.alert]
    return alerting[0].target if alerting else ""


def run_trial(tb: Testbed, trial: Trial, quiet_s: float, timeout_s: float, recover_s: float,
              say: Callable[[str], None]) -> None:
    seen = len(diagnose(tb.run_dir).alerts)
    time.sleep(quiet_s)
    d = diagnose(tb.run_dir)
    trial.quiet_alerts = [a.suspect.target for a in d.alerts[seen:]]
    seen = len(d.alerts)
    onset = tb.now()
    if trial.kind != "none":
        apply(tb, trial, on=True)
    held = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        d = diagnose(tb.run_dir)
        trial.top1 = top_alert(d)
        if trial.truth and trial.top1 == trial.truth:
            if trial.seconds_to_top1 is None:
                trial.seconds_to_top1 = tb.now() - onset
            held += 1
            if held >= HOLD_POLLS:
                break
        else:
            held = 0
    trial.alerts = [a.suspect.target for a in diagnose(tb.run_dir).alerts[seen:]]
    if trial.kind != "none":
        apply(tb, trial, on=False)
    time.sleep(recover_s)
    say(f"trial {trial.index:3}: {trial.where:26} top-1 {trial.top1 or '-':14} "
        f"{'ok' if trial.correct or (not trial.truth and not trial.alerts) else 'WRONG'}"
        f"{f' in {trial.seconds_to_top1:.1f} s' if trial.seconds_to_top1 is not None else ''}"
        f"{f'; false alarms before it: {trial.quiet_alerts}' if trial.quiet_alerts else ''}")


def figures(trials: list[Trial]) -> dict[str, dict]:
    """Per kind and 'all': trials, top-1 accuracy, precision, recall, false alarms, median time."""
    out = {}
    kinds = sorted({t.kind for t in trials if t.kind != "none"}) + ["all"]
    quiet_false = sum(len(t.quiet_alerts) for t in trials)
    for kind in kinds:
        group = [t for t in trials if t.kind != "none" and (kind == "all" or t.kind == kind)]
        raised = [a for t in group for a in t.alerts]
        right = [a for t in group for a in t.alerts if a == t.truth]
        if kind == "all":  # every alert of a window without a fault is a wrong one too
            raised += [a for t in trials if t.kind == "none" for a in t.alerts]
        times = [t.seconds_to_top1 for t in group if t.seconds_to_top1 is not None]
        out[kind] = {
            "trials": len(group),
            "top1_accuracy": sum(t.correct for t in group) / len(group) if group else float("nan"),
            "precision": len(right) / len(raised) if raised else float("nan"),
            "recall": sum(t.truth in t.alerts for t in group) / len(group) if group else float("nan"),
            "median_s_to_top1": statistics.median(times) if times else float("nan"),
        }
    none = [t for t in trials if t.kind == "none"]
    out["all"]["no_fault_trials"] = len(none)
    out["all"]["no_fault_trials_with_alarm"] = sum(bool(t.alerts) for t in none)
    out["all"]["alerts_in_quiet_periods"] = quiet_false
    return out


def table(fig: dict[str, dict]) -> str:
    lines = ["| fault | trials | top-1 accuracy | precision | recall | median onset → correct top-1 (s) |",
             "|---|---|---|---|---|---|"]
    for kind, f in fig.items():
        lines.append(f"| {kind} | {f['trials']} | {100 * f['top1_accuracy']:.0f}% | {100 * f['precision']:.0f}% | "
                     f"{100 * f['recall']:.0f}% | {f['median_s_to_top1']:.1f} |")
    a = fig["all"]
    lines.append("")
    lines.append(f"No-fault trials: {a['no_fault_trials']}, with an alarm: {a['no_fault_trials_with_alarm']}; "
                 f"alerts in the quiet periods before faults: {a['alerts_in_quiet_periods']}.")
    return "\n".join(lines)


def evaluate(trials: int = 60, no_fault: int = 10, seed: int = 1, kinds: tuple[str, ...] = KINDS,
             quiet_s: float = 3.0, timeout_s: float = 10.0, recover_s: float = 3.0,
             say: Callable[[str], None] = print,
             dataplane: str = "soft", topo: Topology | None = None) -> tuple[list[Trial], dict[str, dict], Testbed]:
    """Run the evaluation on a fresh testbed of `topo` (leafspine by default; SERVER_KINDS need
    multi-GPU servers, railopt); the trials, their figures and the (stopped) testbed."""
    with Testbed(topo or leafspine(), dataplane=dataplane, name="diagnose-eval", mode="none") as tb:
        say(f"run directory: {tb.run_dir}")
        plan = plan_trials(tb, trials, no_fault, kinds, seed)
        with Load(tb) as load:
            time.sleep(3.0)  # the rings under way, counters with history
            for trial in plan:
                run_trial(tb, trial, quiet_s, timeout_s, recover_s, say)
        fig = figures(plan)
        (tb.run_dir / "diagnose-eval.json").write_text(json.dumps(
            {"trials": [asdict(t) for t in plan], "figures": fig, "load_errors": load.errors[:20]}, indent=1))
        (tb.run_dir / "diagnose-eval.md").write_text(
            f"# Fault localisation, {len(plan)} trials (seed {seed}, {tb.topo.name}, {dataplane} data plane)\n\n"
            f"{table(fig)}\n"
            f"\nVerdict of the run: {tb.verdict(tb.ready_at, tb.now()).line()}\n")
        say(f"\n{table(fig)}\n\nverdict: {tb.verdict(tb.ready_at, tb.now()).line()}\n"
            f"results: {tb.run_dir / 'diagnose-eval.md'}")
    return plan, fig, tb
