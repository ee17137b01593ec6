"""Real-time scheduling for switch processes, and the guard that keeps a runaway from freezing the machine.

The contract between the testbed (which promotes) and a switch process (which may demote itself):

- ``promote(pid, priority)`` puts every thread of a switch process under SCHED_FIFO at `priority`
  (threads it starts later inherit it) and sets its RLIMIT_RTTIME: the CPU time a real-time
  thread may use without sleeping. A healthy switch sleeps in epoll many times a millisecond; one
  that runs ``RTTIME_SOFT_S`` without sleeping is spinning.
- The soft limit sends SIGXCPU. The soft switch catches it (``install_guard``) and moves all its
  threads back to SCHED_OTHER, logging why: it keeps forwarding, late, and the fidelity monitor
  says so. A process that does not catch it (BMv2) ends on it, and on the hard limit
  (``RTTIME_HARD_S``) the kernel kills any process still spinning.
- Besides, the kernel keeps 5% of every second for normal tasks (kernel.sched_rt_runtime_us,
  left as the machine has it), so even a spin the limit has not caught yet leaves a shell working.

Why real time (measured, README "Fidelity capacity"): at nice 0 a switch waits behind every other
runnable task for its time slice; the 8-rank ring at 20 Mbit/s held 6-7% of its windows faithful
on this machine, and with the four switches at SCHED_FIFO 20 (this module) 80-88%.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
from pathlib import Path
from types import FrameType

DEFAULT_PRIORITY = 20  # SCHED_FIFO 1-99; above the kernel's threaded IRQs' 50 would starve them, so below
RTTIME_SOFT_S = 0.5
RTTIME_HARD_S = 2.0

POLICY_NAMES = {os.SCHED_OTHER: "other", os.SCHED_FIFO: "fifo", os.SCHED_RR: "rr",
                os.SCHED_BATCH: "batch", os.SCHED_IDLE: "idle"}


class RealtimeError(RuntimeError):
    pass


def threads_of(pid: int) -> list[int]:
    """Thread ids of process `pid` (empty when it is gone)."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return []


def promote(pid: int, priority: int = DEFAULT_PRIORITY, soft_s: float = RTTIME_SOFT_S,
            hard_s: float = RTTIME_HARD_S) -> int:
    """Every thread of `pid` to SCHED_FIFO at `priority`, with RLIMIT_RTTIME soft_s/hard_s (seconds
    of CPU without sleeping); the number of threads promoted. RealtimeError names the cause."""
    if not 1 <= priority <= 99:
        raise RealtimeError(f"real-time priority must be 1..99, got {priority}")
    try:
        resource.prlimit(pid, resource.RLIMIT_RTTIME, (int(soft_s * 1e6), int(hard_s * 1e6)))
    except (OSError, ValueError) as exc:
        raise RealtimeError(f"pid {pid}: cannot limit its real-time CPU time (RLIMIT_RTTIME): {exc}") from None
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


def install_guard(log: logging.Logger) -> None:
    """SIGXCPU (RLIMIT_RTTIME's soft limit) demotes this process to normal scheduling, logged once."""

    def on_xcpu(signum: int, frame: FrameType | None) -> None:
        demoted = demote(os.getpid())
        if demoted:
            log.error("a thread ran %.1f s on the CPU at real-time priority without sleeping (RLIMIT_RTTIME): "
                      "%d thread(s) moved back to normal scheduling; timing from now on is the machine's",
                      resource.getrlimit(resource.RLIMIT_RTTIME)[0] / 1e6, demoted)

    signal.signal(signal.SIGXCPU, on_xcpu)


def rt_runtime_share() -> float | None:
    """kernel.sched_rt_runtime_us / sched_rt_period_us: the share of each second real-time tasks
    may use (None when unlimited or unreadable)."""
    try:
        runtime = int(Path("/proc/sys/kernel/sched_rt_runtime_us").read_text())
        period = int(Path("/proc/sys/kernel/sched_rt_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if runtime < 0 else runtime / period
