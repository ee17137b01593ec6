"""The real-time watchdog: a process of its own that demotes a real-time process holding a whole CPU.

    python -m emulation.rtwatch --watch s1=PID=RUN/switches/s1.log --watch controller=PID=RUN/controller.log ...

Runs at SCHED_FIFO WATCHDOG_PRIORITY (above the testbed's real-time processes, wire/realtime.py)
and single-threaded, so no runaway and no GIL of another process can keep it from running. Every
WATCH_PERIOD_S it reads each watched process's CPU time; one that used RUNAWAY_SHARE of a CPU over
the last RUNAWAY_WINDOW_S while real-time is moved to normal scheduling, with a line in its log
(the third part of --watch, optional) and on this process's stdout. It ends on SIGTERM or when
every process it watches has ended.
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


def say(log: Path | None, name: str, text: str) -> None:
    now = time.time()
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))},{int(now % 1 * 1000):03d} rtwatch ERROR {text}\n"
    print(f"{name}: {line}", end="", flush=True)
    if log is not None:
        with log.open("a") as f:  # the process appends too, O_APPEND both
            f.write(line)


def watch(watched: dict[str, int], logs: dict[str, Path]) -> None:
    samples: dict[str, deque[tuple[float, float]]] = {name: deque() for name in watched}
    demoted: set[str] = set()
    while True:
        alive = 0
        for name, pid in watched.items():
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
                say(logs.get(name), name, f"used {share:.0%} of a CPU for {now - window[0][0]:.2f} s at real-time "
                                   f"priority: {count} thread(s) moved back to normal scheduling (a runaway, or more "
                                   f"load than one core forwards); timing from now on is the machine's")
        if not alive:
            return
        time.sleep(WATCH_PERIOD_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="emulation.rtwatch", description=__doc__.splitlines()[0])
    parser.add_argument("--watch", action="append", default=[], metavar="NAME=PID[=LOG]",
                        help="a real-time process to watch, and the log its demotion is written to")
    args = parser.parse_args(argv)
    watched, logs = {}, {}
    for value in args.watch:
        name, _, rest = value.partition("=")
        pid, _, log = rest.partition("=")
        if not name or not pid.isdigit():
            parser.error(f"--watch: expected NAME=PID[=LOG], got {value!r}")
        watched[name] = int(pid)
        if log:
            logs[name] = Path(log)

    def on_term(signum: int, frame: FrameType | None) -> None:
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    promote(os.getpid(), WATCHDOG_PRIORITY)
    print(f"watching {', '.join(watched)} (real-time share >= {RUNAWAY_SHARE:.0%} of a CPU for "
          f"{RUNAWAY_WINDOW_S:g} s is a runaway)", flush=True)
    watch(watched, logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
