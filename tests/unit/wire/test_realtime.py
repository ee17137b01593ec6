"""Real-time scheduling of switch processes and the runaway watchdog, on plain child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wire import realtime

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[3]
SLEEPER = "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\ntime.sleep(30)"
# A spinner with a second thread that takes the GIL every 10 ms: the kernel's RLIMIT_RTTIME never
# caught this one (each GIL hand-off is a sleep); the watchdog must.
SPINNER = ("import threading, time\n"
           "def tick():\n    while True: time.sleep(0.01)\n"
           "threading.Thread(target=tick, daemon=True).start()\n"
           "time.sleep(0.2)\nuntil = time.monotonic() + 3.0\nwhile time.monotonic() < until: pass")


def child(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code])
    while len(realtime.threads_of(proc.pid)) < 2:
        time.sleep(0.01)
    return proc


def test_promote_sets_fifo_on_every_thread_and_demote_takes_it_back():
    proc = child(SLEEPER)
    try:
        assert realtime.promote(proc.pid, 7) == 2
        assert realtime.policy_of(proc.pid) == {"fifo"}
        assert all(os.sched_getparam(t).sched_priority == 7 for t in realtime.threads_of(proc.pid))
        assert realtime.demote(proc.pid) == 2
        assert realtime.policy_of(proc.pid) == {"other"}
        assert realtime.demote(proc.pid) == 0
    finally:
        proc.kill()
        proc.wait()
    assert realtime.threads_of(proc.pid) == [] and realtime.cpu_seconds(proc.pid) is None


def test_a_bad_priority_is_refused():
    with pytest.raises(realtime.RealtimeError, match="1..99"):
        realtime.promote(os.getpid(), 0)


def test_a_block_runs_at_real_time_priority_in_its_own_thread_only_and_the_policy_comes_back():
    """A cable cut's actuation (emulation/net.py set_link) runs with the switches, not behind them."""
    seen: list = []

    def other_thread() -> None:
        seen.append(os.sched_getscheduler(0))

    with realtime.this_thread_at(realtime.DEFAULT_PRIORITY) as raised:
        assert raised
        assert os.sched_getscheduler(0) == os.SCHED_FIFO
        assert os.sched_getparam(0).sched_priority == realtime.DEFAULT_PRIORITY
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert seen == [os.SCHED_FIFO]  # a thread started inside inherits it, as the kernel does
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    with realtime.this_thread_at(0) as raised:  # 0: the testbed runs without real time
        assert not raised and os.sched_getscheduler(0) == os.SCHED_OTHER


def test_the_watchdog_demotes_a_spinning_process_and_leaves_a_sleeping_one(tmp_path):
    spinner, sleeper = child(SPINNER), child(SLEEPER)
    watchdog = None
    try:
        realtime.promote(spinner.pid, realtime.DEFAULT_PRIORITY)
        realtime.promote(sleeper.pid, realtime.DEFAULT_PRIORITY)
        started = time.monotonic()
        watchdog = subprocess.Popen([sys.executable, "-m", "emulation.rtwatch",
                                     f"--watch=spin={spinner.pid}={tmp_path}/spin.log",
                                     f"--watch=sleep={sleeper.pid}={tmp_path}/sleep.log"],
                                    cwd=ROOT, stdout=subprocess.PIPE, text=True)
        while realtime.policy_of(spinner.pid) != {"other"} and time.monotonic() - started < 2.5:
            time.sleep(0.02)
        took = time.monotonic() - started
        assert realtime.policy_of(spinner.pid) == {"other"}, "the spinner was never demoted"
        assert took < 1.5, f"demoted after {took:.2f} s"
        assert spinner.poll() is None  # demoted, not killed
        assert realtime.policy_of(sleeper.pid) == {"fifo"}
        assert "moved back to normal scheduling" in (tmp_path / "spin.log").read_text()
        assert not (tmp_path / "sleep.log").exists()
    finally:
        for proc in (spinner, sleeper, watchdog):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_watchdog_ends_when_what_it_watches_has_ended(tmp_path):
    proc = child(SLEEPER)
    watchdog = subprocess.Popen([sys.executable, "-m", "emulation.rtwatch", f"--watch=s={proc.pid}"], cwd=ROOT)
    try:
        time.sleep(0.3)
        assert watchdog.poll() is None
        proc.kill()
        proc.wait()
        assert watchdog.wait(5) == 0
    finally:
        if watchdog.poll() is None:
            watchdog.kill()
            watchdog.wait()
