"""Control-loop latency of the advice loop: a new flow starts → every affected host has applied its new rate.

    sudo .venv/bin/python bench/advice_latency.py [--events 50]

On the default leaf-spine in mode advice, h1 sends UDP to h5 all along (so it holds the whole
19 Mbit/s). Each event starts a second flow h2 → h5; the event ends when both h1 (its share
halves) and h2 (its first advice) have applied their new HTB rates, as recorded by their agents.
The latency runs from the new flow's first datagram (its own wall clock, inside h2) to the later
of the two applications. Between events the second flow stops and the advice returns to one flow.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.net import Testbed  # noqa: E402
from topologies import leafspine  # noqa: E402

SENDER = ROOT / "bench" / "flow_start.py"


def applied_after(path: Path, dst: str, t: float, pred) -> float | None:
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["event"] == "advice" and row["dst"] == dst and float(row["applied"]) >= t and \
                    pred(int(row["rate_bps"])):
                return float(row["applied"])
    return None


def wait_for(fn, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value is not None:
            return value
        time.sleep(0.02)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50)
    args = parser.parse_args()
    latencies = []
    with Testbed(leafspine(), dataplane="soft", name="bench-advice-latency", mode="advice") as tb:
        h1, h2, h5 = tb.host("h1"), tb.host("h2"), tb.host("h5")
        agents = tb.run_dir / "hostagents"
        seconds = 4 + args.events * 3
        h1.cmd(f"{sys.executable} {SENDER} {h5.IP()} 9000 9000 25 {seconds} > /dev/null &")
        print(f"run directory {tb.run_dir}; background flow h1 -> h5 for up to {seconds} s")
        wait_for(lambda: applied_after(agents / "h1.csv", h5.IP(), 0, lambda r: r > 15e6), 10)
        for event in range(args.events):
            out = tb.run_dir / f"flow-{event}.txt"
            h2.cmd(f"{sys.executable} {SENDER} {h5.IP()} 9001 {20000 + event} 10 1.0 > {out} &")
            started = wait_for(lambda o=out: float(o.read_text()) if o.exists() and o.read_text().strip() else None, 5)
            if started is None:
                print(f"event {event}: the second flow did not report its start", file=sys.stderr)
                continue
            t1 = wait_for(lambda s=started: applied_after(agents / "h1.csv", h5.IP(), s, lambda r: 0 < r < 15e6), 5)
            t2 = wait_for(lambda s=started: applied_after(agents / "h2.csv", h5.IP(), s, lambda r: r > 0), 5)
            if t1 is None or t2 is None:
                print(f"event {event}: advice not applied within 5 s (h1 {t1}, h2 {t2})", file=sys.stderr)
                continue
            latencies.append((max(t1, t2) - started) * 1e3)
            print(f"event {event:2}: {latencies[-1]:6.1f} ms", flush=True)
            # back to one flow: h2's flow has ended and h1 has its whole share again
            wait_for(lambda s=started: applied_after(agents / "h1.csv", h5.IP(), s + 1.0, lambda r: r > 15e6), 6)
    if not latencies:
        print("no events measured", file=sys.stderr)
        return 1
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))]
    print(f"\ncontrol-loop latency over {len(latencies)} events: median {statistics.median(latencies):.1f} ms, "
          f"p99 {p99:.1f} ms, min {latencies[0]:.1f} ms, max {latencies[-1]:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
