"""CPU provisioning of a testbed: the switches, the controller and the host agents run at real-time
priority, the watchdog demotes a runaway switch before it stops the machine answering, cpu.csv
says where the CPU went, and teardown leaves the machine's scheduling as it found it."""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

import pytest

from emulation.cpuuse import CPU_CSV, usage
from emulation.net import Testbed
from emulation.rundir import process_start_time
from tests.integration.helpers import wait_until
from topologies import leafspine
from wire import faultsfile, realtime

pytestmark = [pytest.mark.mininet, pytest.mark.root]

SPIN_MS = 3000
DEMOTED_WITHIN_S = 2.0  # every spinning switch back to normal scheduling, long before its spin ends
ANSWER_WITHIN_S = 0.9  # the worst wake-up lag of a normal thread meanwhile (the kernel alone: ~0.95 s)
SYSCTLS = ("/proc/sys/kernel/sched_rt_runtime_us", "/proc/sys/kernel/sched_rt_period_us",
           "/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def machine_state() -> dict:
    """What a testbed must leave as it found it: this process's scheduling, nice, affinity and
    cgroups, and the kernel's real-time budget."""
    return {"policy": os.sched_getscheduler(0), "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": os.sched_getaffinity(0), "cgroups": Path("/proc/self/cgroup").read_text(),
            "rttime": resource.getrlimit(resource.RLIMIT_RTTIME),
            **{path: Path(path).read_text() for path in SYSCTLS}}


def worst_lag_while(action, period_s: float = 0.01) -> float:
    """The worst wake-up lag (s) of a normal-priority thread of this process while `action` runs."""
    worst = [0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            due = time.monotonic() + period_s
            time.sleep(period_s)
            worst[0] = max(worst[0], time.monotonic() - due)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        action()
    finally:
        done.set()
        watcher.join()
    return worst[0]


def test_switches_run_real_time_a_runaway_demotes_itself_and_teardown_leaves_nothing():
    before = machine_state()
    with Testbed(leafspine(), dataplane="soft", name="test-cpu-provisioning") as tb:
        assert tb.controller is not None
        control = [tb.controller.pid, *(proc.pid for proc in tb.agents.values())]
        assert all(realtime.policy_of(pid) == {"fifo"} for pid in control), [realtime.policy_of(p) for p in control]
        pids = {name: sw.process.proc.pid for name, sw in tb.switches.items()}
        starts = {name: process_start_time(pid) for name, pid in pids.items()}
        for name, pid in pids.items():
            assert realtime.policy_of(pid) == {"fifo"}, (name, realtime.policy_of(pid))
            assert tb.switches[name].process.scheduling == f"fifo {realtime.DEFAULT_PRIORITY}"
        assert tb.net is not None
        assert tb.net.ping([tb.host("h1"), tb.host("h5")], timeout="1") == 0

        # Every switch spins at once, on a 2-core machine: without the watchdog they would hold both
        # cores for 3 s but for the kernel's 5%.
        def spin_all() -> None:
            for name in pids:
                faultsfile.write(tb.switches[name].process.faults_path, {"spin_ms": SPIN_MS})
            assert wait_until(lambda: all(realtime.policy_of(pid) == {"other"} for pid in pids.values()),
                              DEMOTED_WITHIN_S, 0.02), {n: realtime.policy_of(p) for n, p in pids.items()}

        lag = worst_lag_while(spin_all)
        print(f"\n  every switch spinning {SPIN_MS} ms: a normal thread's worst wake-up lag {lag * 1000:.0f} ms")
        assert lag < ANSWER_WITHIN_S, f"the machine stopped answering for {lag:.2f} s"
        for name in pids:
            log = (tb.run_dir / "switches" / f"{name}.log").read_text()
            assert "moved back to normal scheduling" in log, f"{name} did not say it was demoted"
        # demoted, they still forward; the controller and agents were left alone
        assert wait_until(lambda: tb.net.ping([tb.host("h1"), tb.host("h5")], timeout="1") == 0, 10.0)
        assert all(realtime.policy_of(pid) == {"fifo"} for pid in control)

        t1 = tb.now()
        used = usage(tb.run_dir / CPU_CSV, tb.ready_at, t1)
        assert used is not None and set(used.by_switch) == set(pids), used
        assert used.by_kind["switches"] > 0.5, used.line()  # they spun for 2 s each
        assert "CPU: the testbed used" in tb.verdict(tb.ready_at, t1).line()
    for name, pid in pids.items():
        assert process_start_time(pid) != starts[name], f"switch {name} (pid {pid}) outlived its testbed"
    assert machine_state() == before
    assert "CPU: the testbed used" in (tb.run_dir / "fidelity.txt").read_text()
