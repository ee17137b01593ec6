"""The real-time watchdog: a process of its own that demotes a switch which holds a whole CPU.

    python -m testbed.rtwatch --switch s1=PID --switch s2=PID ... --log-dir RUN/switches

Runs at SCHED_FIFO WATCHDOG_PRIORITY (above the switches, wire/realtime.py) and single-threaded,
so no runaway and no GIL of another process can keep it from running. Every WATCH_PERIOD_S it
reads each switch's CPU time; one that used RUNAWAY_SHARE of a CPU over the last RUNAWAY_WINDOW_S
while real-time is moved to normal scheduling, with a line in its log (switches/<name>.log) and
in this process's stdout. It ends on SIGTERM or when every switch it watches has ended.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path
from types import FrameType

from wire.realtime import (
    RUNAWAY_SHARE,
    RUNAWAY_WINDOW_S,
    WATCH_PERIOD_S,
    WATCHDOG_PRIORITY,
    cpu_seconds,
    demote,
    policy_of,
    promote,
)


def runaway(samples: deque[tuple[float, float]]) -> float | None:
    """The CPU share over the window the samples (time, cpu seconds) span, once they span it."""
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    if t1 - t0 < RUNAWAY_WINDOW_S:
        return None
    return (c1 - c0) / (t1 - t0)


def say(log_dir: Path | None, name: str, text: str) -> None:
    now = time.time()
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))},{int(now % 1 * 1000):03d} rtwatch ERROR {text}\n"
    print(f"{name}: {line}", end="", flush=True)
    if log_dir is not None:
        with (log_dir / f"{name}.log").open("a") as f:  # the switch appends too, O_APPEND both
            f.write(line)


def watch(switches: dict[str, int], log_dir: Path | None) -> None:
    samples: dict[str, deque[tuple[float, float]]] = {name: deque() for name in switches}
    demoted: set[str] = set()
    while True:
        alive = 0
        for name, pid in switches.items():
            used = cpu_seconds(pid)
            if used is None:
                continue
            alive += 1
            if name in demoted:
                continue
            now = time.monotonic()
            window = samples[name]
            window.append((now, used))
            while len(window) > 2 and now - window[1][0] >= RUNAWAY_WINDOW_S:
                window.popleft()
            share = runaway(window)
            if share is not None and share >= RUNAWAY_SHARE and "fifo" in policy_of(pid):
                count = demote(pid)
                demoted.add(name)
                say(log_dir, name, f"used {share:.0%} of a CPU for {now - window[0][0]:.2f} s at real-time "
                                   f"priority: {count} thread(s) moved back to normal scheduling (a runaway, or more "
                                   f"load than one core forwards); timing from now on is the machine's")
        if not alive:
            return
        time.sleep(WATCH_PERIOD_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed.rtwatch", description=__doc__.splitlines()[0])
    parser.add_argument("--switch", action="append", default=[], metavar="NAME=PID")
    parser.add_argument("--log-dir", type=Path, help="where the switches' logs are (switches/)")
    args = parser.parse_args(argv)
    switches = {}
    for value in args.switch:
        name, sep, pid = value.partition("=")
        if not sep or not pid.isdigit():
            parser.error(f"--switch: expected NAME=PID, got {value!r}")
        switches[name] = int(pid)

    def on_term(signum: int, frame: FrameType | None) -> None:
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    promote(os.getpid(), WATCHDOG_PRIORITY)
    watch(switches, args.log_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
