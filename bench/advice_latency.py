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
(issue "Live view": within 5% of none open).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulation.net import Testbed  # noqa: E402
from topologies import leafspine  # noqa: E402
from wire import advice_pb2 as pb  # noqa: E402
from wire import advice_pb2_grpc as pb_grpc  # noqa: E402
from wire import runfiles  # noqa: E402
from wire.fidelity import read_records  # noqa: E402
from wire.stats import percentile  # noqa: E402

SENDER = ROOT / "bench" / "flow_start.py"
GOAL_MEDIAN_MS, GOAL_P99_MS, GOAL_DECLARED_P99_MS = 5.0, 10.0, 5.0


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


@contextmanager
def live_pages(url: str | None, pages: int) -> Iterator[None]:
    """`pages` live pages open in Debian's chromium (Playwright) while the block runs."""
    if pages <= 0:
        yield
        return
    if url is None:
        raise SystemExit("the controller serves no live page")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for _ in range(pages):
            page = browser.new_page()
            page.goto(url)
            page.wait_for_function("window.starnetLive && window.starnetLive.frames > 1", timeout=15000)
        print(f"{pages} live pages open on {url}")
        try:
            yield
        finally:
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30, help="events of each kind")
    parser.add_argument("--kind", choices=("both", "int", "declared"), default="both")
    parser.add_argument("--pages", type=int, default=0, help="live pages open in chromium meanwhile (Playwright)")
    args = parser.parse_args()
    int_stages = Stages(["first datagram sent (h2)", "first reported packet leaves the source switch",
                         "... leaves the sink switch (report cloned)", "collector has the report",
                         "advisor decision", "h2's agent received the advice", "h2's netlink call done",
                         "h1's and h2's rates both in force"])
    declared_stages = Stages(["DeclareDemand sent", "advisor decision", "h2's agent received the advice",
                              "h2's netlink call done", "h1's and h2's rates both in force"])
    with Testbed(leafspine(), dataplane="soft", name="bench-advice-latency", mode="advice") as tb, \
            live_pages(tb.live_url, args.pages):
        h1, h5 = tb.host("h1"), tb.host("h5")
        kinds = ["int", "declared"] if args.kind == "both" else [args.kind]
        seconds = 6 + args.events * 3 * len(kinds)
        h1.cmd(f"{sys.executable} {SENDER} {h5.IP()} 9000 9000 25 {seconds} > /dev/null &")
        print(f"run directory {tb.run_dir}; background flow h1 -> h5 for up to {seconds} s")
        wait_for(lambda: applied_after(tb.run_dir, "h1", h5.IP(), 0, lambda r: r > 15e6), 10)
        t0 = tb.now()
        epochs = runfiles.int_clock_epochs(tb.run_dir, list(tb.switches))
        channel = grpc.insecure_channel((tb.run_dir / "controller.addr").read_text().strip())
        stub = pb_grpc.AdviceStub(channel)
        for event in range(args.events):
            for kind in kinds:
                times = int_event(tb, event, epochs) if kind == "int" else declared_event(tb, stub, event)
                if times is not None:
                    (int_stages if kind == "int" else declared_stages).add(times)
                    print(f"{kind:8} event {event:2}: {(times[-1] - times[0]) * 1e3:6.1f} ms", flush=True)
                # back to one demand: h1 has its whole share again
                last = time.time()
                wait_for(lambda s=last: applied_after(tb.run_dir, "h1", h5.IP(), s, lambda r: r > 15e6), 6)
        channel.close()
        verdict = tb.verdict(t0, tb.now())
        lags = [r.max_late_ms for r in read_records(tb.fidelity_path)
                if r.source == "controller" and r.kind == "loop" and t0 <= r.start]
    print()
    if int_stages.events:
        print(int_stages.table("INT-detected flows", GOAL_MEDIAN_MS, GOAL_P99_MS))
    if declared_stages.events:
        print(declared_stages.table("declared demands", GOAL_MEDIAN_MS, GOAL_DECLARED_P99_MS))
    print(f"controller loop lag per 100 ms window ({args.pages} live pages open): median "
          f"{statistics.median(lags):.2f} ms, p99 {percentile(lags, 99):.2f} ms over {len(lags)} windows")
    print(f"fidelity: {verdict.line()}")
    return 0 if int_stages.events or declared_stages.events else 1


if __name__ == "__main__":
    sys.exit(main())
