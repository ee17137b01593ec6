"""Reading a run's fidelity.csv: which 100 ms windows were faithful, and the one-line verdict.

A window is *faithful* for a set of switches (the measured path) when none of them had a late
event in it. A late event of lateness L detected at t flags every window that [t - L, t + L]
touches (late_from .. late_until of its record): the stall itself, and the time the backlog it
released needs to drain (a burst of L's worth of link time drains in L). Loop lag of the
controller and host agents is reported beside the verdict ("so a late advice can be told from a
slow advisor") but does not flag windows.
Record format, its parser (WindowRecord, read_records) and tolerances: wire/fidelity.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from emulation.cpuuse import CpuUsage
from wire import runfiles
from wire.fidelity import WINDOW_S, FidelityIndex, WindowRecord, judge, read_records

FIDELITY_CSV = runfiles.FIDELITY
__all__ = ["FIDELITY_CSV", "FidelityIndex", "Verdict", "WindowRecord", "drops_by_window", "read_records", "recent",
           "verdict", "window_span"]


@dataclass
class Verdict:
    """Fidelity of [t0, t1) for `sources` (switch names): per window, who flagged it and why."""

    t0: float
    t1: float
    run_start: float
    windows: list[int]
    flagged: dict[int, set[str]] = field(default_factory=dict)  # window -> switches that spoiled it
    worst_ms: float = 0.0
    worst_source: str = ""
    worst_at: float = 0.0  # wall time of the worst window's start
    loop_worst: dict[str, float] = field(default_factory=dict)  # controller/agents: worst lag (ms)
    sampled: list[str] = field(default_factory=list)  # switches timed from INT samples only (BMv2)
    cpu: CpuUsage | None = None  # where the CPU went meanwhile (cpu.csv), when known
    cpu_servers: dict[str, CpuUsage] = field(default_factory=dict)  # cluster mode: on each other server

    @property
    def faithful(self) -> list[int]:
        return [w for w in self.windows if w not in self.flagged]

    @property
    def fraction(self) -> float:
        return len(self.faithful) / len(self.windows) if self.windows else 1.0

    def is_faithful(self, t: float) -> bool:
        return int(t / WINDOW_S) not in self.flagged

    def line(self) -> str:
        """'timing held in 97.3% of 100 ms windows; worst 41 ms on s3 at t=12.4 s' (t from the run's start)."""
        text = (f"timing held in {100 * self.fraction:.1f}% of {len(self.windows)} "
                f"{WINDOW_S * 1000:.0f} ms windows")
        if self.worst_source:
            text += (f"; worst {self.worst_ms:.1f} ms on {self.worst_source} "
                     f"at t={self.worst_at - self.run_start:.1f} s")
        if self.loop_worst:
            who = max(self.loop_worst, key=self.loop_worst.__getitem__)
            text += f"; loop lag worst {self.loop_worst[who]:.1f} ms ({who})"
        if self.sampled:
            text += (f"; {', '.join(sorted(self.sampled))} (BMv2) timed from INT samples only "
                     f"(hop latency beyond the queue; time in the kernel before BMv2 reads a frame unseen)")
        if self.cpu is not None:
            text += f"; {self.cpu.line()}"
        for server, used in sorted(self.cpu_servers.items()):
            text += f"; on {server}: {used.line()}"
        return text

    def flagged_lines(self) -> list[str]:
        return [f"t={w * WINDOW_S - self.run_start:7.1f} s  {', '.join(sorted(self.flagged[w]))}"
                for w in sorted(self.flagged) if w in set(self.windows)]


def window_span(t0: float, t1: float) -> tuple[int, int]:
    """The windows [first, last) wall-clock [t0, t1) touches."""
    return int(t0 / WINDOW_S), math.ceil(t1 / WINDOW_S)


def verdict(records: Iterable[WindowRecord], t0: float, t1: float, sources: Iterable[str] | None = None,
            run_start: float | None = None, sampled: Iterable[str] = ()) -> Verdict:
    """The verdict over wall-clock [t0, t1) for the switches in `sources` (None: every switch);
    `sampled`: switches timed only from INT samples (BMv2, by the controller), named in the line."""
    wanted = set(sources) if sources is not None else None
    first, last = window_span(t0, t1)
    j = judge(records, first, last, wanted)
    return Verdict(t0, t1, t0 if run_start is None else run_start, list(range(first, last)), j.flagged,
                   j.worst_ms, j.worst_source, j.worst_at, j.loop_worst,
                   sampled=[s for s in sampled if wanted is None or s in wanted])


def drops_by_window(records: Iterable[WindowRecord], source: str) -> dict[int, int]:
    """Tail drops per window that switch `source` counted."""
    out: dict[int, int] = {}
    for rec in records:
        if rec.source == source and rec.kind == "switch" and rec.drops:
            out[rec.window] = out.get(rec.window, 0) + rec.drops
    return out


def recent(records: Iterable[WindowRecord], now: float, seconds: float) -> dict[str, dict[str, float]]:
    """Per source over the last `seconds`: windows seen, late windows, worst ms, events (CLI `fidelity`)."""
    since = int((now - seconds) / WINDOW_S)
    out: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.window < since:
            continue
        row = out.setdefault(rec.source, {"kind": rec.kind, "windows": 0, "late_windows": 0, "worst_ms": 0.0,
                                          "events": 0, "drops": 0})
        row["windows"] += 1
        row["late_windows"] += bool(rec.late_events)
        row["worst_ms"] = max(row["worst_ms"], rec.max_late_ms)
        row["events"] += rec.events
        row["drops"] += rec.drops or 0
    return out
