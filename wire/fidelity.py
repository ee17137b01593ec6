"""Emulation fidelity records: lateness per 100 ms window, appended by every process to fidelity.csv.

Every process whose timing a result depends on measures how late it was:

- a soft switch (kind ``switch``): per egress port while its queue is backlogged, each departure
  against the ideal schedule at the port's rate (a frame that could have left at t left at
  t + lateness); per receive batch, now minus the kernel's receive timestamp of the oldest frame;
- a BMv2 switch (kind ``switch``, written by the controller, which sees it only through INT): per
  INT hop the switch stamped and a report brought back, its hop latency minus the longest its
  schedule allows: the q packets it found at enqueue and its own slot, (q + 1) departures at the
  port's rate (BMv2 drains BMV2_RATE_PKT_BYTES-sized packets per second) — what BMv2 held the
  packet beyond its queue. Sampled (INT packets that were
  reported, about one in 8 per flow and at most one per 10 ms), and blind to time a frame waited in
  the kernel before BMv2 read it, which the soft switch's kernel timestamps see;
- the controller and each host agent (kind ``loop``): the lag of a periodic wake-up (scheduled vs
  actual), so a late advice can be told from a slow advisor.

Samples are aggregated per window of WINDOW_S of wall-clock time (windows align across processes)
and one line per window is appended to the run's ``fidelity.csv`` with a single write(2) on an
O_APPEND descriptor, so lines of different processes never interleave. A *late event* is a sample
above the tolerance; ``late_from`` is the earliest moment a late event of the window was already
late (its detection time minus its lateness), ``late_until`` the latest detection time plus
lateness (the backlog a stall released drains in as long as the stall lasted), so a reader can flag
every window a stall and its aftermath covered.
Records are read back by `read_records` (a whole file), `FidelityIndex` (a growing file read once,
bucketed by window: a testbed's verdicts) or `FidelityTail` (following a live file, for the
controller's /metrics and live page); the verdict is in emulation/fidelity.py.

Default tolerance, DEFAULT_TOLERANCE_MS: a lateness of L at link rate R releases L·R/1500 frames at
once; at the default 20 Mbit/s a frame takes 0.6 ms, so 2 ms is 3.3 frames, below the 5-packet queue
a paced fabric should hold. The idle-machine distribution it is set above is in README (Fidelity).
"""

from __future__ import annotations

import asyncio
import csv
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.runfiles import LineTail

WINDOW_S = 0.1
LAG_PERIOD_S = 0.01  # loop-lag probes wake this often
DEFAULT_TOLERANCE_MS = 2.0
# BMv2 queues drain in packets/s: the testbed converts a link rate at this frame size.
BMV2_RATE_PKT_BYTES = 1500
COLUMNS = ("window", "source", "kind", "events", "late_events", "max_late_ms", "late_from", "late_until",
           "ingress_max_ms", "egress_max_ms", "drops")
HEADER = ",".join(COLUMNS) + "\n"


@dataclass(frozen=True, slots=True)
class WindowRecord:
    """One line of fidelity.csv (times in wall-clock seconds, lateness in ms)."""

    window: int  # index: start time / WINDOW_S
    source: str
    kind: str
    events: int
    late_events: int
    max_late_ms: float
    late_from: float | None
    late_until: float | None
    ingress_max_ms: float
    egress_max_ms: float
    drops: int | None

    @property
    def start(self) -> float:
        return self.window * WINDOW_S

    def flagged(self) -> range:
        """Indices of the windows this record's late events spoil (empty if it has none)."""
        if not self.late_events:
            return range(0)
        first = self.late_from if self.late_from is not None else self.start
        until = self.late_until if self.late_until is not None else self.start + WINDOW_S
        return range(min(self.window, int(first / WINDOW_S)), max(self.window, int(until / WINDOW_S)) + 1)


@dataclass
class Judged:
    """What the records say of windows [first, last): which a late event spoiled and by whom, the
    worst lateness of a switch and where, and each loop's worst lag (ms)."""

    flagged: dict[int, set[str]] = field(default_factory=dict)
    worst_ms: float = 0.0
    worst_source: str = ""
    worst_at: float = 0.0  # wall time of the worst window's start
    loop_worst: dict[str, float] = field(default_factory=dict)


def judge(records: Iterable[WindowRecord], first: int, last: int, sources: set[str] | None = None) -> Judged:
    """Judge windows [first, last) by the switches in `sources` (None: every one) and every loop: the
    one reading of fidelity records, for a run's verdict (emulation/fidelity.py) and the live page."""
    out = Judged()
    for rec in records:
        if rec.kind == "loop":
            if first <= rec.window < last:
                out.loop_worst[rec.source] = max(out.loop_worst.get(rec.source, 0.0), rec.max_late_ms)
            continue
        if sources is not None and rec.source not in sources:
            continue
        span = rec.flagged()
        for w in range(max(span.start, first), min(span.stop, last)):
            out.flagged.setdefault(w, set()).add(rec.source)
        if first <= rec.window < last and rec.max_late_ms > out.worst_ms:
            out.worst_ms, out.worst_source, out.worst_at = rec.max_late_ms, rec.source, rec.start
    return out


def fidelity_files(path: Path) -> list[Path]:
    """A run's fidelity files: `path` (fidelity.csv, this machine's processes) and, in cluster mode,
    each other server's beside it (runfiles.server_fidelity: fidelity-<server>.csv)."""
    path = Path(path)
    return [path, *sorted(path.parent.glob(f"{path.stem}-*{path.suffix}"))]


def read_records(path: Path) -> list[WindowRecord]:
    """Every record of a fidelity.csv and of the other servers' files beside it (fidelity_files); a
    malformed line (a truncated last line of a process killed mid-write, say) is skipped."""
    out: list[WindowRecord] = []
    for one in fidelity_files(path):
        try:
            with one.open(newline="") as f:
                out += [rec for row in csv.DictReader(f) if (rec := parse_row(row)) is not None]
        except FileNotFoundError:
            pass
    return out


KINDS = ("switch", "loop")
# A late event's span (late_from, late_until) further than this from its window is no record of this
# file's writers: a line that two writers' appends cut into each other (seen on a run directory
# shared through FUSE, where O_APPEND is not atomic between machines) can still parse.
MAX_SPAN_S = 600.0


def parse_row(row: Mapping[Any, Any]) -> WindowRecord | None:
    """One record from a row of fidelity.csv (column → text, as csv.DictReader gives it); None for a
    malformed or truncated row (see parse_fields), or one with fields over (DictReader's None key)."""
    values: list[Any] = [row.get(c) for c in COLUMNS]
    if None in row or any(v is None for v in values):
        return None
    return parse_fields(values)


def parse_fields(values: list[str]) -> WindowRecord | None:
    """One record from a line's fields in COLUMNS order; None for the header or a malformed line:
    fields missing or over, a kind not in KINDS, counts below zero, or a late span that does not
    surround its window within MAX_SPAN_S."""
    if len(values) != len(COLUMNS):
        return None
    (window_text, source, kind, events, late_events, max_late_ms, late_from_text, late_until_text, ingress_max_ms,
     egress_max_ms, drops) = values
    try:
        window = float(window_text)
        late_from = float(late_from_text) if late_from_text else None
        late_until = float(late_until_text) if late_until_text else None
        record = WindowRecord(
            window=round(window / WINDOW_S), source=source, kind=kind, events=int(events),
            late_events=int(late_events), max_late_ms=float(max_late_ms), late_from=late_from,
            late_until=late_until, ingress_max_ms=float(ingress_max_ms), egress_max_ms=float(egress_max_ms),
            drops=int(drops) if drops else None)
    except ValueError:
        return None
    spans = [t for t in (late_from, late_until) if t is not None]
    if (kind not in KINDS or not source or min(record.events, record.late_events, record.drops or 0) < 0
            or any(abs(t - window) > MAX_SPAN_S for t in spans) or (len(spans) == 2 and spans[0] > spans[1])):
        return None
    return record


class FidelityLines:
    """Follows a run's fidelity files as processes append to them (a LineTail each, a server's file
    followed from when it appears): `poll` parses the complete lines written since the last poll."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.tails: dict[Path, LineTail] = {}

    def poll(self) -> list[WindowRecord]:
        for one in fidelity_files(self.path):
            if one not in self.tails:
                self.tails[one] = LineTail(one)
        return [rec for tail in self.tails.values() for rec in tail.poll(parse_fields)]


class FidelityIndex:
    """A run's fidelity files read as processes append to them, each line parsed once (FidelityLines), its
    records bucketed by window, so a verdict over [first, last) judges the records that can bear on
    those windows instead of re-reading the file: over an 80-minute bench a fidelity.csv holds ~2
    million lines, and reading one whole took 23 s for 280,000 on a busy 2-core machine, once per
    verdict. A record bears on the windows it is in and those its late events flag (`flagged`,
    which reaches back to the start of a stall and ahead through its aftermath): `records` returns
    every record whose window lies within the widest such reach seen so far of [first, last), a
    superset of what `judge` uses: the same flagged windows, worst lateness and loop lags as the whole
    file gives."""

    def __init__(self, path: Path) -> None:
        self.lines = FidelityLines(path)
        self.by_window: dict[int, list[WindowRecord]] = {}
        self.back = 0  # the most windows a late record flagged before its own
        self.ahead = 0  # ... and after it
        self.lock = threading.Lock()

    def records(self, first: int, last: int) -> list[WindowRecord]:
        """Every record (appended so far) that can bear on windows [first, last)."""
        with self.lock:
            for rec in self.lines.poll():
                self.by_window.setdefault(rec.window, []).append(rec)
                if rec.late_events:
                    span = rec.flagged()
                    self.back = max(self.back, rec.window - span.start)
                    self.ahead = max(self.ahead, span.stop - 1 - rec.window)
            low, high = first - self.ahead, last + self.back
            if high - low > len(self.by_window):  # a span wider than the file: walk the buckets instead
                return [rec for w, bucket in self.by_window.items() if low <= w < high for rec in bucket]
            return [rec for w in range(low, high) for rec in self.by_window.get(w, ())]


class FidelityTail:
    """Follows a run's fidelity files while processes append to them (FidelityLines): each `poll`
    parses the lines written since the last one and keeps, per (source, kind), windows seen, late windows, and
    the newest window's record. For live readers (the controller's /metrics and live page)."""

    def __init__(self, path: Path) -> None:
        self.lines = FidelityLines(path)
        self.windows: dict[tuple[str, str], int] = {}
        self.late_windows: dict[tuple[str, str], int] = {}
        self.newest: dict[tuple[str, str], WindowRecord] = {}
        self.lock = threading.Lock()

    def poll(self) -> list[WindowRecord]:
        """Parse what was appended since the last poll; returns those records (thread-safe)."""
        with self.lock:
            records = self.lines.poll()
            for rec in records:
                key = (rec.source, rec.kind)
                self.windows[key] = self.windows.get(key, 0) + 1
                self.late_windows[key] = self.late_windows.get(key, 0) + bool(rec.late_events)
                if key not in self.newest or rec.window >= self.newest[key].window:
                    self.newest[key] = rec
            return records


def create_file(path: Path) -> None:
    """Start an empty fidelity.csv (header only), before any process appends to it."""
    Path(path).write_text(HEADER)


class FidelityWindows:
    """Lateness samples of one process, aggregated per window and appended to `path`.

    source: who measured (switch or host name, "controller"); kind: "switch" or "loop";
    tolerance_ms: a sample above it is a late event. Times are wall-clock seconds (time.time()),
    so windows of different processes line up; callers on a monotonic clock pass
    `monotonic + offset` (see wall_offset()).
    """

    __slots__ = ("fd", "source", "kind", "tolerance_s", "window", "events", "late_events", "max_late",
                 "late_from", "late_until", "ingress_max", "egress_max", "drops_seen", "rows", "late_rows",
                 "worst_s", "worst_at", "deferred")

    def __init__(self, path: Path | None, source: str, kind: str, tolerance_ms: float = DEFAULT_TOLERANCE_MS,
                 deferred: bool = False) -> None:
        """deferred: closed windows' lines wait for flush() (another thread's), so the measuring
        thread never blocks in write(2) (a soft switch's forwarding thread)."""
        if tolerance_ms <= 0:
            raise ValueError(f"fidelity tolerance must be > 0 ms, got {tolerance_ms}")
        self.deferred: deque[str] | None = deque() if deferred else None
        self.fd: int | None = None
        if path is not None:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.fstat(self.fd).st_size == 0:
                os.write(self.fd, HEADER.encode())
        self.source = source
        self.kind = kind
        self.tolerance_s = tolerance_ms / 1000
        self.window = -1
        self.drops_seen = 0
        self.rows = 0
        self.late_rows = 0
        self.worst_s = 0.0
        self.worst_at = 0.0
        self._reset()

    def _reset(self) -> None:
        self.events = 0
        self.late_events = 0
        self.max_late = 0.0
        self.late_from = 0.0
        self.late_until = 0.0
        self.ingress_max = 0.0
        self.egress_max = 0.0

    def tick(self, now: float, drops_total: int | None = None) -> None:
        """Close the current window when `now` is past it; drops_total: cumulative tail drops."""
        window = int(now / WINDOW_S)
        if window == self.window:
            return
        if self.window >= 0 and (self.events or self.late_events):
            self._write(drops_total)
        elif drops_total is not None:
            self.drops_seen = drops_total
        self.window = window
        self._reset()

    def _write(self, drops_total: int | None) -> None:
        drops = ""
        if drops_total is not None:
            drops = str(drops_total - self.drops_seen)
            self.drops_seen = drops_total
        line = (f"{self.window * WINDOW_S:.1f},{self.source},{self.kind},{self.events},{self.late_events},"
                f"{self.max_late * 1e3:.3f},{f'{self.late_from:.6f}' if self.late_events else ''},"
                f"{f'{self.late_until:.6f}' if self.late_events else ''},"
                f"{self.ingress_max * 1e3:.3f},{self.egress_max * 1e3:.3f},{drops}\n")
        self.rows += 1
        if self.late_events:
            self.late_rows += 1
        if self.max_late > self.worst_s:
            self.worst_s, self.worst_at = self.max_late, self.window * WINDOW_S
        if self.deferred is not None:
            self.deferred.append(line)
        elif self.fd is not None:
            os.write(self.fd, line.encode())

    def flush(self) -> None:
        """Write the lines deferred so far, in one write(2) (thread-safe against the measuring thread)."""
        lines = []
        while self.deferred:
            lines.append(self.deferred.popleft())
        if lines and self.fd is not None:
            os.write(self.fd, "".join(lines).encode())

    def late(self, lateness_s: float, now: float) -> None:
        """One sample (seconds late at wall time `now`), of no particular direction."""
        if lateness_s > self.max_late:
            self.max_late = lateness_s
        if lateness_s > self.tolerance_s:
            start, until = now - lateness_s, now + lateness_s
            if not self.late_events:
                self.late_from, self.late_until = start, until
            elif start < self.late_from:
                self.late_from = start
            if until > self.late_until:
                self.late_until = until
            self.late_events += 1

    def ingress_late(self, lateness_s: float, now: float) -> None:
        if lateness_s > self.ingress_max:
            self.ingress_max = lateness_s
        self.late(lateness_s, now)

    def egress_late(self, lateness_s: float, now: float) -> None:
        if lateness_s > self.egress_max:
            self.egress_max = lateness_s
        self.late(lateness_s, now)

    def wake_up(self, lag_s: float) -> None:
        """A loop-lag probe woke `lag_s` after it was due (now, on the wall clock)."""
        now = time.time()
        self.tick(now)
        self.events += 1
        self.late(lag_s if lag_s > 0 else 0.0, now)

    def summary(self) -> dict[str, float | int]:
        """Totals over the closed windows (for a process's stats)."""
        return {"tolerance_ms": self.tolerance_s * 1e3, "windows": self.rows, "late_windows": self.late_rows,
                "worst_ms": round(self.worst_s * 1e3, 3), "worst_window": self.worst_at}

    def close(self, now: float | None = None, drops_total: int | None = None) -> None:
        """Write the last window and close the file."""
        if self.window >= 0 and (self.events or self.late_events):
            self._write(drops_total)
        self.window = -1
        self._reset()
        self.flush()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def wall_offset() -> float:
    """time.time() - time.monotonic(): add it to a monotonic time to get the wall time."""
    return time.time() - time.monotonic()


async def watch_loop_lag(windows: FidelityWindows, stopping: asyncio.Event, period_s: float = LAG_PERIOD_S) -> None:
    """Sample this asyncio loop's lag (actual minus scheduled wake-up) every period_s until `stopping`."""
    loop = asyncio.get_running_loop()
    try:
        while not stopping.is_set():
            due = loop.time() + period_s
            await asyncio.sleep(period_s)
            windows.wake_up(loop.time() - due)
    finally:
        windows.close()


def watch_thread_lag(windows: FidelityWindows, stopping: threading.Event, period_s: float = LAG_PERIOD_S) -> None:
    """The same for a threaded process: the lag of a thread's timed wait (scheduling and GIL)."""
    try:
        while True:
            due = time.monotonic() + period_s
            if stopping.wait(period_s):
                break
            windows.wake_up(time.monotonic() - due)
    finally:
        windows.close()
