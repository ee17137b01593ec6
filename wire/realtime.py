"""Real-time scheduling for switch processes, and the watchdog that keeps a runaway from freezing the machine.

- ``this_thread_at(priority)`` runs a block of the calling thread at real-time priority (a fault's
  actuation, emulation/net.py's set_link), then restores its policy.
- ``promote(pid, priority)`` puts every thread of a switch process under SCHED_FIFO at `priority`
  (threads it starts later inherit it). The testbed does it once a switch is ready
  (emulation/switchproc.py) and starts the watchdog over them (emulation/rtwatch.py).
- A switch that takes a whole CPU for RUNAWAY_WINDOW_S is a runaway (a loop that does not end, or
  more load than a core can forward): at real-time priority it would hold that CPU against
  everything else on the machine. The watchdog, a small process of its own at WATCHDOG_PRIORITY
  (above the switches), reads each switch's CPU time every WATCH_PERIOD_S and ``demote``s a
  runaway to normal scheduling, saying so in the switch's log: it keeps forwarding, late, and the
  fidelity monitor says so.
- Why not RLIMIT_RTTIME (the kernel's limit on real-time CPU without sleeping, tried first): a
  Python thread that spins still sleeps whenever another thread of its process takes the GIL, and
  each such sleep resets the kernel's count — a spinning soft switch with a housekeeping thread
  was never caught. A watchdog on CPU shares sees it, and works alike for BMv2.
- Underneath, the kernel keeps 5% of every second for normal tasks (kernel.sched_rt_runtime_us,
  left as the machine has it): a shell answers even before the watchdog acts.

Why real time (measured, README "Fidelity capacity"): at nice 0 a switch waits behind every other
runnable task for its time slice; the 8-rank ring at 20 Mbit/s held 6-7% of its windows faithful
on this machine, and with the four switches at SCHED_FIFO 20 97-99%.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEFAULT_PRIORITY = 20  # SCHED_FIFO 1-99; below the kernel's threaded IRQs' 50, which it must not starve
WATCHDOG_PRIORITY = 40  # above the switches, so a runaway cannot keep it from running
WATCH_PERIOD_S = 0.05
RUNAWAY_WINDOW_S = 0.3
RUNAWAY_SHARE = 0.9  # of one CPU over the window

POLICY_NAMES = {os.SCHED_OTHER: "other", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr",
                os.SCHED_BATCH: "batch", os.SCHED_IDLE: "idle"}
HZ = os.sysconf("SC_CLK_TCK")


class RealtimeError(RuntimeError):
    pass


def threads_of(pid: int) -> list[int]:
    """Thread ids of process `pid` (empty when it is gone)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return []


def promote(pid: int, priority: int = DEFAULT_PRIORITY) -> int:
    """Every thread of `pid` to SCHED_FIFO at `priority`; the number of threads promoted.
    RealtimeError names the cause (not root, a real-time cgroup without a budget)."""
    if not 1 <= priority <= 99:
        raise RealtimeError(f"real-time priority must be 1..99, got {priority}")
    tids = threads_of(pid)
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except OSError as exc:
            raise RealtimeError(f"pid {pid}: cannot set SCHED_FIFO {priority}: {exc}"
                                + (" (needs root)" if exc.errno == 1 else "")) from None
    return len(tids)


@contextmanager
def this_thread_at(priority: int) -> Iterator[bool]:
    """The calling thread at SCHED_FIFO `priority` for the block (True), then back to the policy
    it had; False, and nothing changed, where it may not (not root; priority 0: stay as it is).
    For short actuation that belongs to the emulated physics, such as a cable cut: at normal
    priority it waits behind the real-time switches (0.2-0.7 s seen beside a running ring)."""
    before, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        if not priority:
            raise PermissionError("normal scheduling asked for")
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, before, param)


def demote(pid: int) -> int:
    """Every thread of `pid` back to SCHED_OTHER (nice unchanged); how many were real-time."""
    count = 0
    for tid in threads_of(pid):
        try:
            if os.sched_getscheduler(tid) in (os.SCHED_FIFO, os.SCHED_RR):
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                count += 1
        except ProcessLookupError:
            continue
    return count


def policy_of(pid: int) -> set[str]:
    """The scheduling policies of `pid`'s threads ("fifo", "other", ...)."""
    policies = set()
    for tid in threads_of(pid):
        try:
            policies.add(POLICY_NAMES.get(os.sched_getscheduler(tid), "?"))
        except ProcessLookupError:
            continue
    return policies


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, every thread) process `pid` has used; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / HZ
