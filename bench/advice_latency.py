"""Control-loop latency of the advice loop, stage by stage: a new demand appears → every affected host
has applied its new rate.

    sudo .venv/bin/python bench/advice_latency.py [--events 30] [--kind both|int|declared] [--pages 5]

On the default leaf-spine in mode advice, h1 sends UDP to h5 all along (so it holds the whole
19 Mbit/s). Each event adds a second demand h2 → h5; it ends when both h1 (its share halves) and
h2 (its first advice) have applied their new HTB rates, as their agents record. Between events the
second demand ends and the advice returns to one flow. Two kinds of event:

- int: h2 starts a UDP flow; the controller learns of it from INT. Stages: first datagram sent (its
  own clock, in h2) → the first reported packet leaves the source switch (its INT hop) → leaves
  the sink switch, where the report is cloned → the collector has the report (int-flows.csv) →
  the advisor's decision (advice.csv) → h2's agent receives it → h2's netlink call done → the
  later of h1's and h2's rates in force. Switch hop times are on each switch's own µs clock,
  placed on the wall clock by the epoch in its stats file (soft switch only). The first reported
  packet may be later than the first INT-sampled one (reports are rate-limited per flow slot).
- declared: h2's demand is declared through the advice API (DeclareDemand), as all-reduce ranks
  do before they send. Stages: declaration sent → decision → received → applied → all applied.

Goals (issue "Performance"): median <= 5 ms, p99 <= 10 ms end to end; declared demands p99 <= 5 ms.
Printed with the fidelity verdict of the run and the controller's loop lag. --pages N keeps N live
pages (controller/live.py) open in Debian's chromium all along, to measure what watching costs
(issue "Live view": within 5% of none open). Two separate runs differ by more than that (15% in loop
lag between two runs with no page), so `--pages N --blocks B` compares within one run: the events in
B blocks, none open in the odd ones and N open in the even ones, each condition's figures (advice
latency, the controller's loop lag, its CPU and its web front's from cpu.csv) over its own blocks.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulation import cpuuse  # noqa: E402
from emulation.net import Testbed  # noqa: E402
from topologies import leafspine  # noqa: E402
from wire import advice_pb2 as pb  # noqa: E402
from wire import advice_pb2_grpc as pb_grpc  # noqa: E402
from wire import runfiles  # noqa: E402
from wire.fidelity import read_records  # noqa: E402
from wire.stats import percentile  # noqa: E402

SENDER = ROOT / "bench" / "flow_start.py"
GOAL_MEDIAN_MS, GOAL_P99_MS, GOAL_DECLARED_P99_MS = 5.0, 10.0, 5.0
PAGE_DRAWS_S = 60  # a page opened draws its first frames within this (chromium on a loaded machine)


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def first(items: list[dict], pred: Callable[[dict], bool]) -> dict | None:
    return next((r for r in items if pred(r)), None)


def applied_after(run_dir: Path, host: str, dst: str, t: float, pred: Callable[[int], bool]) -> dict | None:
    return first(rows(run_dir / "hostagents" / f"{host}.csv"),
                 lambda r: r["event"] == "advice" and r["dst"] == dst and float(r["applied"]) >= t
                 and pred(int(r["rate_bps"])))


def wait_for(fn: Callable[[], object], timeout_s: float) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value is not None:
            return value
        time.sleep(0.02)
    return None


class Stages:
    """Per event, the wall time of each stage; printed as the delay from the stage before."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.events: list[list[float]] = []

    def add(self, times: list[float]) -> None:
        self.events.append(times)

    def table(self, title: str, goal_median_ms: float, goal_p99_ms: float) -> str:
        lines = [f"{title}: {len(self.events)} events", f"  {'stage':58} {'median ms':>10} {'p99 ms':>8}"]
        for i, name in enumerate(self.names[1:], start=1):
            deltas = [(e[i] - e[i - 1]) * 1e3 for e in self.events]
            step_p99 = percentile(deltas, 99)
            lines.append(f"  {name:58} {statistics.median(deltas):10.2f} {step_p99:8.2f}")
        total = [(e[-1] - e[0]) * 1e3 for e in self.events]
        median, p99 = statistics.median(total), percentile(total, 99)
        met = median <= goal_median_ms and p99 <= goal_p99_ms
        lines.append(f"  {'end to end':58} {median:10.2f} {p99:8.2f}   (goal median <= {goal_median_ms:g}, "
                     f"p99 <= {goal_p99_ms:g}: {'met' if met else 'NOT met'}; min {min(total):.1f}, "
                     f"max {max(total):.1f})")
        return "\n".join(lines)


def both_applied(tb: Testbed, h2: str, dst: str, t: float) -> tuple[dict, dict] | None:
    a2 = applied_after(tb.run_dir, h2, dst, t, lambda r: r > 0)
    a1 = applied_after(tb.run_dir, "h1", dst, t, lambda r: 0 < r < 15e6)
    return (a1, a2) if a1 and a2 else None


def int_event(tb: Testbed, event: int, epochs: dict[str, float]) -> list[float] | None:
    h2, h5 = tb.host("h2"), tb.host("h5")
    out = tb.run_dir / f"flow-{event}.txt"
    sport = 20000 + event
    h2.cmd(f"{sys.executable} {SENDER} {h5.IP()} 9001 {sport} 10 1.0 > {out} &")
    started = wait_for(lambda: float(out.read_text()) if out.exists() and out.read_text().strip() else None, 5)
    if started is None:
        print(f"int event {event}: the flow did not report its start", file=sys.stderr)
        return None
    assert isinstance(started, float)
    found = wait_for(lambda: both_applied(tb, "h2", h5.IP(), started), 5)
    report = first(rows(tb.run_dir / "int-flows.csv"), lambda r: r["src"] == h2.IP() and r["sport"] == str(sport))
    if not found or report is None:
        print(f"int event {event}: advice not applied within 5 s, or no report", file=sys.stderr)
        return None
    a1, a2 = found  # type: ignore[misc]
    path = report["path"].split()
    if path[0] not in epochs or path[-1] not in epochs:
        print(f"int event {event}: no clock epoch for {path[0]} or {path[-1]} (BMv2?)", file=sys.stderr)
        return None
    source = epochs[path[0]] + int(report["source_egress_us"]) / 1e6
    sink = epochs[path[-1]] + int(report["sink_egress_us"]) / 1e6
    collected = float(report["time"])
    decision = first(rows(tb.run_dir / "advice.csv"),
                     lambda r: r["src"] == h2.IP() and r["dst"] == h5.IP() and float(r["time"]) >= collected - 1e-3)
    if decision is None:
        return None
    received, applied = float(a2["received"]), float(a2["applied"])
    return [started, source, sink, collected, float(decision["time"]), received, applied,
            max(applied, float(a1["applied"]))]


def declared_event(tb: Testbed, stub: pb_grpc.AdviceStub, event: int) -> list[float] | None:
    h2, h5 = tb.host("h2"), tb.host("h5")
    started = time.time()
    stub.DeclareDemand(pb.DemandRequest(src=h2.IP(), dst=h5.IP(), bytes=10_000_000), timeout=5)
    found = wait_for(lambda: both_applied(tb, "h2", h5.IP(), started), 5)
    stub.DeclareDemand(pb.DemandRequest(src=h2.IP(), dst=h5.IP(), stop=True), timeout=5)
    if not found:
        print(f"declared event {event}: advice not applied within 5 s", file=sys.stderr)
        return None
    a1, a2 = found  # type: ignore[misc]
    decision = first(rows(tb.run_dir / "advice.csv"),
                     lambda r: r["src"] == h2.IP() and r["dst"] == h5.IP() and float(r["time"]) >= started)
    if decision is None:
        return None
    return [started, float(decision["time"]), float(a2["received"]), float(a2["applied"]),
            max(float(a2["applied"]), float(a1["applied"]))]


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (/proc/<pid>/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


@contextmanager
def browser(url: str | None, needed: bool, niceness: int = 0) -> Iterator[Callable[[int], Any]]:
    """Debian's chromium (Playwright) while the block runs, if `needed`, at `niceness` (the renderers
    it forks later inherit it); yields `pages(n)`: a context in which n live pages are open on `url`,
    each drawing frames before it is entered."""
    if not needed:
        yield lambda n: nullcontext()
        return
    if url is None:
        raise SystemExit("the controller serves no live page")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        if niceness:
            for pid in descendants(os.getpid()):
                if Path(f"/proc/{pid}/comm").read_text().strip().startswith("chrom"):
                    os.setpriority(os.PRIO_PROCESS, pid, niceness)

        @contextmanager
        def pages(n: int) -> Iterator[None]:
            opened = []
            try:
                for _ in range(n):
                    page = chromium.new_page()
                    opened.append(page)
                    page.goto(url)
                    page.wait_for_function("window.starnetLive && window.starnetLive.frames > 1",
                                           timeout=PAGE_DRAWS_S * 1e3)
                if n:
                    print(f"{n} live pages open on {url}", flush=True)
                yield
            finally:
                for page in opened:
                    page.close()

        try:
            yield pages
        finally:
            chromium.close()


class Condition:
    """What one condition (so many pages open) measured: its stages per kind, and its time spans."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.stages = {"int": Stages(["first datagram sent (h2)", "first reported packet leaves the source switch",
                                      "... leaves the sink switch (report cloned)", "collector has the report",
                                      "advisor decision", "h2's agent received the advice", "h2's netlink call done",
                                      "h1's and h2's rates both in force"]),
                       "declared": Stages(["DeclareDemand sent", "advisor decision", "h2's agent received the advice",
                                           "h2's netlink call done", "h1's and h2's rates both in force"])}
        self.spans: list[tuple[float, float]] = []

    def lags(self, fidelity: Path) -> list[float]:
        return [r.max_late_ms for r in read_records(fidelity) if r.source == "controller" and r.kind == "loop"
                and any(t0 <= r.start < t1 for t0, t1 in self.spans)]

    def cpu(self, run_dir: Path) -> dict[str, float]:
        """Cores the controller and its web front used, over this condition's spans."""
        used = {"controller": 0.0, "front": 0.0}
        seconds = 0.0
        for t0, t1 in self.spans:
            usage = cpuuse.usage(run_dir / cpuuse.CPU_CSV, t0, t1)
            if usage is not None:
                for kind in used:
                    used[kind] += usage.by_kind.get(kind, 0.0) * usage.seconds
                seconds += usage.seconds
        return {kind: v / seconds for kind, v in used.items()} if seconds else used


def end_to_end(stages: Stages) -> tuple[float, float] | None:
    total = [(e[-1] - e[0]) * 1e3 for e in stages.events]
    return (statistics.median(total), percentile(total, 99)) if total else None


def compare(conditions: list[Condition], fidelity: Path, run_dir: Path) -> None:
    """Each condition's figures side by side, and watching's cost against none open (goal: within 5%)."""
    none, watched = conditions
    rows_: list[tuple[str, float, float]] = []
    for kind in ("int", "declared"):
        a, b = end_to_end(none.stages[kind]), end_to_end(watched.stages[kind])
        if a and b:
            rows_ += [(f"advice latency, {kind}, median (ms)", a[0], b[0]),
                      (f"advice latency, {kind}, p99 (ms)", a[1], b[1])]
    lag_a, lag_b = none.lags(fidelity), watched.lags(fidelity)
    if lag_a and lag_b:
        rows_ += [("controller loop lag, median (ms)", statistics.median(lag_a), statistics.median(lag_b)),
                  ("controller loop lag, p99 (ms)", percentile(lag_a, 99), percentile(lag_b, 99))]
    cpu_a, cpu_b = none.cpu(run_dir), watched.cpu(run_dir)
    rows_ += [("controller CPU (cores)", cpu_a["controller"], cpu_b["controller"]),
              ("web front CPU (cores)", cpu_a["front"], cpu_b["front"])]
    print(f"\n{'':42} {'0 pages':>10} {f'{watched.pages} pages':>10} {'ratio':>7}")
    for label, a, b in rows_:
        print(f"  {label:40} {a:10.3f} {b:10.3f} {b / a if a else float('nan'):7.2f}")
    within = [b <= a * 1.05 for label, a, b in rows_ if "median" in label]
    print(f"goal (issue 'Live view'): the advice loop's latency and the controller's loop lag with "
          f"{watched.pages} pages open within 5% of none open, medians: {'met' if all(within) else 'NOT met'} "
          f"({sum(within)} of {len(within)}); blocks of each: {len(none.spans)} and {len(watched.spans)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30, help="events of each kind")
    parser.add_argument("--kind", choices=("both", "int", "declared"), default="both")
    parser.add_argument("--pages", type=int, default=0, help="live pages open in chromium meanwhile (Playwright)")
    parser.add_argument("--browser-nice", type=int, default=0, metavar="N",
                        help="chromium at this niceness (19: a browser that yields the CPU to the testbed and "
                             "to this bench's own client, as one on another machine would)")
    parser.add_argument("--blocks", type=int, default=1,
                        help="with --pages: events in this many blocks, pages open in every second one (compare)")
    args = parser.parse_args()
    blocks = max(1, args.blocks) if args.pages else 1
    conditions = [Condition(0), Condition(args.pages)] if blocks > 1 else [Condition(args.pages)]
    with Testbed(leafspine(), dataplane="soft", name="bench-advice-latency", mode="advice") as tb, \
            browser(tb.live_url, args.pages > 0, args.browser_nice) as pages:
        h1, h5 = tb.host("h1"), tb.host("h5")
        kinds = ["int", "declared"] if args.kind == "both" else [args.kind]
        seconds = 6 + args.events * 3 * len(kinds) + blocks * (PAGE_DRAWS_S * args.pages if args.pages else 0)
        h1.cmd(f"{sys.executable} {SENDER} {h5.IP()} 9000 9000 25 {seconds} > /dev/null &")
        print(f"run directory {tb.run_dir}; background flow h1 -> h5 for up to {seconds} s")
        wait_for(lambda: applied_after(tb.run_dir, "h1", h5.IP(), 0, lambda r: r > 15e6), 10)
        t0 = tb.now()
        epochs = runfiles.int_clock_epochs(tb.run_dir, list(tb.switches))
        channel = grpc.insecure_channel((tb.run_dir / "controller.addr").read_text().strip())
        stub = pb_grpc.AdviceStub(channel)
        per_block = -(-args.events // blocks)
        for block in range(blocks):
            condition = conditions[block % 2] if blocks > 1 else conditions[0]
            with pages(condition.pages):
                began = tb.now()
                for event in range(block * per_block, min(args.events, (block + 1) * per_block)):
                    for kind in kinds:
                        times = int_event(tb, event, epochs) if kind == "int" else declared_event(tb, stub, event)
                        if times is not None:
                            condition.stages[kind].add(times)
                            print(f"{kind:8} event {event:2} ({condition.pages} pages): "
                                  f"{(times[-1] - times[0]) * 1e3:6.1f} ms", flush=True)
                        # back to one demand: h1 has its whole share again
                        last = time.time()
                        wait_for(lambda s=last: applied_after(tb.run_dir, "h1", h5.IP(), s, lambda r: r > 15e6), 6)
                condition.spans.append((began, tb.now()))
        channel.close()
        verdict = tb.verdict(t0, tb.now())
        run_dir, fidelity = tb.run_dir, tb.fidelity_path
    print()
    for condition in conditions:
        for kind, goal_p99 in (("int", GOAL_P99_MS), ("declared", GOAL_DECLARED_P99_MS)):
            if condition.stages[kind].events:
                title = "INT-detected flows" if kind == "int" else "declared demands"
                print(condition.stages[kind].table(f"{title}, {condition.pages} live pages open",
                                                   GOAL_MEDIAN_MS, goal_p99))
        lags = condition.lags(fidelity)
        if lags:
            print(f"controller loop lag per 100 ms window ({condition.pages} live pages open): median "
                  f"{statistics.median(lags):.2f} ms, p99 {percentile(lags, 99):.2f} ms over {len(lags)} windows")
    if len(conditions) == 2:
        compare(conditions, fidelity, run_dir)
    print(f"fidelity: {verdict.line()}")
    return 0 if any(c.stages[k].events for c in conditions for k in c.stages) else 1


if __name__ == "__main__":
    sys.exit(main())
