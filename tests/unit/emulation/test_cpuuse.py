"""cpu.csv: CPU per process kind per window, summed over a span for the verdict line."""

from __future__ import annotations

import os
import time

import pytest

from emulation import cpuuse
from emulation.fidelity import verdict
from wire.runfiles import record_pid


def test_recorded_processes_get_their_kinds():
    assert cpuuse.kind_of("switch-s3") == "switch"
    assert cpuuse.kind_of("controller") == "controller"
    assert cpuuse.kind_of("agent-h1") == "agents"
    assert cpuuse.kind_of("rank-ring-h4") == "workloads"
    assert cpuuse.kind_of("sampler-tcp-advice") == "samplers"
    assert cpuuse.kind_of("rtwatch") == cpuuse.kind_of("rtwatch-srv2") == cpuuse.kind_of("sampler-cpu-srv2") \
        == "samplers"
    assert cpuuse.kind_of("host-h1") is None and cpuuse.kind_of("shell-s1") is None


def test_usage_sums_a_span_in_cores(tmp_path):
    path = tmp_path / cpuuse.CPU_CSV
    path.write_text("window,source,kind,cpu_ms\n"
                    "100.0,s1,switch,50.0\n100.0,s2,switch,30.0\n100.0,controller,controller,20.0\n"
                    "100.0,machine,machine,160.0\n"
                    "100.1,s1,switch,50.0\n100.1,machine,machine,60.0\n"
                    "100.2,s1,switch,90.0\n"  # outside [100.0, 100.2)
                    "broken line\n")
    used = cpuuse.usage(path, 100.0, 100.2)
    assert used is not None
    assert used.by_switch == pytest.approx({"s1": 0.5, "s2": 0.15})
    assert used.by_kind == pytest.approx({"switches": 0.65, "controller": 0.1})
    assert used.machine == pytest.approx(1.1)
    assert used.others == pytest.approx(0.35)
    assert "switches 0.65" in used.line() and "other work 0.35" in used.line()
    assert cpuuse.usage(path, 200.0, 201.0) is None
    assert cpuuse.usage(tmp_path / "missing.csv", 100.0, 101.0) is None


def test_a_verdict_line_carries_the_cpu_picture(tmp_path):
    result = verdict([], 100.0, 101.0)
    result.cpu = cpuuse.CpuUsage(seconds=1.0, by_kind={"switches": 1.2}, machine=1.5, cores=2)
    assert result.line().endswith("CPU: the testbed used 1.20 of 2 cores (switches 1.20), other work 0.30")


def test_a_verdict_line_names_each_other_servers_cpu(tmp_path):
    result = verdict([], 100.0, 101.0)
    result.cpu = cpuuse.CpuUsage(seconds=1.0, by_kind={"switches": 1.2}, machine=1.5, cores=2)
    result.cpu_servers["srv2"] = cpuuse.CpuUsage(seconds=1.0, by_kind={"switches": 3.0}, machine=3.5, cores=8)
    assert result.line().endswith("other work 0.30; on srv2: CPU: the testbed used 3.00 of 8 cores "
                                  "(switches 3.00), other work 0.50")


def test_a_servers_sampler_reads_the_processes_recorded_there_not_the_testbeds(tmp_path):
    # cluster mode: `python -m emulation.cpuuse --server srv9` runs on srv9, reading remote-pids/srv9/
    records = tmp_path / "remote-pids" / "srv9"
    records.mkdir(parents=True)
    busy = os.fork()
    if busy == 0:
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            pass
        os._exit(0)
    (records / "switch-s7.pid").write_text(f"{busy} 0\n")
    (tmp_path / "pids").mkdir()
    record_pid(tmp_path, "switch-s1", os.getpid())  # this machine's: not the server's
    t0 = time.time()
    sampler = cpuuse.CpuSampler(tmp_path, "srv9").start()
    time.sleep(0.8)
    os.waitpid(busy, 0)
    sampler.stop()
    assert not (tmp_path / cpuuse.CPU_CSV).exists()
    used = cpuuse.usage(tmp_path / "cpu-srv9.csv", t0, time.time() + 1, machine_cores=8)
    assert used is not None and used.cores == 8
    assert set(used.by_switch) == {"s7"} and "testbed" not in used.by_kind, used.line()
    assert used.by_switch["s7"] > 0.05, used.line()  # it spun (a loose floor: the machine may be busy)


def test_the_sampler_writes_the_windows_of_a_busy_recorded_process(tmp_path):
    (tmp_path / "pids").mkdir()
    busy = os.fork()
    if busy == 0:  # a child that spins for 1.2 s
        until = time.monotonic() + 1.2
        while time.monotonic() < until:
            pass
        os._exit(0)
    record_pid(tmp_path, "rank-job-h1", busy)
    t0 = time.time()
    sampler = cpuuse.CpuSampler(tmp_path).start()
    time.sleep(1.0)  # its CPU is read while it runs (it is reaped below)
    _, _, rusage = os.wait4(busy, 0)
    sampler.stop()
    used = cpuuse.usage(tmp_path / cpuuse.CPU_CSV, t0, time.time() + 1)
    assert used is not None
    spent = (rusage.ru_utime + rusage.ru_stime) / used.seconds  # cores, as the kernel counted it
    # /proc ticks are 10 ms; the last ones may fall after the sampler's last look at the living child
    assert used.by_kind.get("workloads", 0.0) == pytest.approx(spent, abs=0.15 + 0.2 * spent), used.line()
    assert used.machine >= used.by_kind["workloads"] * 0.9, used.line()


def test_a_sampler_that_woke_late_spreads_the_time_over_the_windows_it_missed() -> None:
    """Kept from running for 250 ms past a window's end, the sampler writes the CPU it finds over
    the three windows that ended, never a window with more CPU than the machine has."""
    assert cpuuse.windows_ended(10.0, 10.001) == 1
    assert cpuuse.windows_ended(10.0, 10.25) == 3
    assert cpuuse.windows_ended(10.0, 9.999) == 1
    lines = cpuuse.rows({("s1", "switch"): 0.45, ("machine", "machine"): 0.6, ("h1", "agents"): 0.0}, 9.9, 3)
    assert lines.splitlines() == ["9.9,s1,switch,150.0", "9.9,machine,machine,200.0",
                                  "10.0,s1,switch,150.0", "10.0,machine,machine,200.0",
                                  "10.1,s1,switch,150.0", "10.1,machine,machine,200.0"]
