"""Where the CPU goes during a run: per process kind per 100 ms window, in the run's cpu.csv.

A thread of the testbed's own process reads, every window, the CPU time (user + system, from
/proc/<pid>/stat) of every process the run recorded in pids/ (switches, controller, host agents,
ranks and flow agents, samplers) and the machine's busy time (/proc/stat), and appends one line per
source and window:

    window,source,kind,cpu_ms

with `window` the window's start (wall-clock seconds, as in fidelity.csv), `source` a switch's
name or a kind's total ("controller", "front": the controller's web front, "agents", "workloads",
"samplers": TCP state samplers and the real-time watchdog, "testbed": the process running the
testbed, "machine": every CPU of the machine, busy), and cpu_ms the CPU time used in it (a core
fully used for a window is 100 ms).
``usage`` sums a span of it for the verdict line ("CPU: the testbed used 1.3 of 2 cores —
switches 0.9, ... — other work 0.4"), and ``top_others`` names the processes outside the run that
took the most CPU, for a failure's message.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from wire import runfiles
from wire.fidelity import WINDOW_S
from wire.realtime import HZ, cpu_seconds

CPU_CSV = runfiles.CPU
CORES = os.cpu_count() or 1
REFRESH_PIDS_S = 1.0
KINDS = ("switches", "controller", "front", "agents", "workloads", "samplers", "testbed")


def kind_of(label: str) -> str | None:
    """The kind of a process recorded as pids/<label>.pid (None: an idle Mininet shell)."""
    if label.startswith("switch-"):
        return "switch"
    if label == "controller":
        return "controller"
    if label == "front":  # the controller's web front (controller/front.py): /metrics and the live page
        return "front"
    if label.startswith("agent-"):
        return "agents"
    if label.startswith(("sampler-", "rtwatch")):  # rtwatch-<server>: a server's own watchdog
        return "samplers"
    if label.startswith(("host-", "shell-")):
        return None
    return "workloads"


def machine_busy_s() -> float:
    """Busy CPU time of the whole machine since boot, seconds over all cores (/proc/stat's first line
    without idle and iowait)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / HZ


def process_cpu(pid: int) -> tuple[str, float]:
    """(command name, CPU seconds used: user + system) of one process; OSError once it is gone."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text.rsplit(")", 1)[1].split()
    return text[text.find("(") + 1:text.rfind(")")], (int(fields[11]) + int(fields[12])) / HZ


def all_processes_cpu() -> dict[int, tuple[str, float]]:
    """Every process on the machine: pid -> (command name, CPU seconds used)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            out[int(entry)] = process_cpu(int(entry))
        except OSError:
            continue
    return out


def windows_ended(next_end: float, now: float) -> int:
    """How many windows have ended by `now`, the first of them at `next_end` (at least 1: the
    sampler wakes at an end). More than one when the sampler's thread was kept from running."""
    return max(1, int((now - next_end) / WINDOW_S) + 1)


def rows(used: dict[tuple[str, str], float], first: float, count: int) -> str:
    """cpu.csv lines for CPU seconds `used` per (source, kind) over `count` windows from `first`,
    spread evenly: a sampler that woke late cannot tell when in them the time was used, and put
    into one window it read as more cores than the machine has (5.3 of 2, beside a ring)."""
    return "".join(f"{first + i * WINDOW_S:.1f},{source},{kind},{seconds / count * 1e3:.1f}\n"
                   for i in range(count) for (source, kind), seconds in used.items() if seconds > 0)


class CpuSampler:
    """Appends cpu.csv for `run_dir` every window from a daemon thread until stop(). server: on a server
    of the run's cluster (`python -m emulation.cpuuse --server NAME`, started there), the processes the
    run recorded on it (remote-pids/<server>/, its own among them) into cpu-<server>.csv."""

    def __init__(self, run_dir: Path, server: str | None = None) -> None:
        self.run_dir = run_dir
        self.path = run_dir / (runfiles.server_cpu(server) if server else CPU_CSV)
        self.records = run_dir / (f"{runfiles.REMOTE_PIDS}/{server}" if server else runfiles.PIDS)
        self.own = server is None  # this process is the testbed's (on a server: a sampler in the records)
        self._stop = threading.Event()
        self._labels: dict[int, tuple[str, str]] = {}  # pid -> (source, kind)
        self._last: dict[int, float] = {}
        self._pids_read = 0.0
        self._thread: threading.Thread | None = None
        self.started_cpu = all_processes_cpu()  # the baseline of top_others
        self.own_pids: set[int] = set()  # every pid the run ever recorded

    def start(self) -> CpuSampler:
        self.path.write_text("window,source,kind,cpu_ms\n")
        self._refresh_pids()
        self._pids_read = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _refresh_pids(self) -> None:
        labels = {os.getpid(): ("testbed", "testbed")} if self.own else {}
        for pid_file in self.records.glob("*.pid"):
            try:
                pid = int(pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            kind = kind_of(pid_file.stem)
            self.own_pids.add(pid)
            if kind is not None:
                labels[pid] = (pid_file.stem.removeprefix("switch-") if kind == "switch" else kind, kind)
        self._labels = labels

    def _run(self) -> None:
        last_machine = machine_busy_s()
        if self.own:
            self._last[os.getpid()] = cpu_seconds(os.getpid()) or 0.0  # counted from now on
        next_at = (int(time.time() / WINDOW_S) + 1) * WINDOW_S
        with self.path.open("a") as out:
            while not self._stop.wait(max(0.0, next_at - time.time())):
                first = next_at - WINDOW_S  # the oldest window not written yet
                ended = windows_ended(next_at, time.time())
                next_at += ended * WINDOW_S
                if time.monotonic() - self._pids_read >= REFRESH_PIDS_S:
                    self._refresh_pids()
                    self._pids_read = time.monotonic()
                used: dict[tuple[str, str], float] = {}
                for pid, key in self._labels.items():
                    now = cpu_seconds(pid)
                    if now is None:
                        continue
                    before = self._last.get(pid, 0.0)  # a process new to the run: all its CPU is the run's
                    self._last[pid] = now
                    if now > before:
                        used[key] = used.get(key, 0.0) + now - before
                machine = machine_busy_s()
                used[("machine", "machine")] = machine - last_machine
                last_machine = machine
                out.write(rows(used, first, ended))
                out.flush()

    def top_others(self, count: int = 3) -> list[tuple[str, int, float]]:
        """The processes outside this run that used the most CPU since the sampler was made:
        (name, pid, CPU seconds)."""
        now = all_processes_cpu()
        mine = self.own_pids | {os.getpid()}
        used = [(name, pid, cpu - self.started_cpu.get(pid, (name, 0.0))[1])
                for pid, (name, cpu) in now.items() if pid not in mine]
        return sorted((u for u in used if u[2] > 0.05), key=lambda u: -u[2])[:count]


@dataclass
class CpuUsage:
    """CPU used over a span, in cores (1.0 = one core busy for the whole span)."""

    seconds: float
    by_kind: dict[str, float] = field(default_factory=dict)
    by_switch: dict[str, float] = field(default_factory=dict)
    machine: float = 0.0
    cores: int = CORES

    @property
    def testbed(self) -> float:
        return sum(self.by_kind.values())

    @property
    def others(self) -> float:
        return max(0.0, self.machine - self.testbed)

    def line(self) -> str:
        """'CPU: the testbed used 1.3 of 2 cores (switches 0.9, controller 0.3, ...), other work 0.4'."""
        parts = ", ".join(f"{kind} {self.by_kind[kind]:.2f}" for kind in KINDS if self.by_kind.get(kind))
        return (f"CPU: the testbed used {self.testbed:.2f} of {self.cores} cores ({parts}), "
                f"other work {self.others:.2f}")


def usage(path: Path, t0: float, t1: float, machine_cores: int = CORES) -> CpuUsage | None:
    """CPU used in wall-clock [t0, t1) from a cpu.csv (None when it has no line there); machine_cores:
    of the machine it was sampled on."""
    result = CpuUsage(seconds=max(t1 - t0, WINDOW_S), cores=machine_cores)
    seen = False
    try:
        with Path(path).open(newline="") as f:
            for row in csv.DictReader(f):
                try:
                    start, cores = float(row["window"]), float(row["cpu_ms"]) / 1e3
                except (KeyError, TypeError, ValueError):
                    continue
                if not t0 - WINDOW_S / 2 <= start < t1:
                    continue
                seen = True
                kind = row["kind"]
                if kind == "machine":
                    result.machine += cores
                elif kind == "switch":
                    result.by_switch[row["source"]] = result.by_switch.get(row["source"], 0.0) + cores
                    result.by_kind["switches"] = result.by_kind.get("switches", 0.0) + cores
                else:
                    result.by_kind[kind] = result.by_kind.get(kind, 0.0) + cores
    except FileNotFoundError:
        return None
    if not seen:
        return None
    span = result.seconds
    result.machine /= span
    result.by_kind = {k: v / span for k, v in result.by_kind.items()}
    result.by_switch = {k: v / span for k, v in result.by_switch.items()}
    return result


def main(argv: list[str] | None = None) -> int:
    """A server's sampler (cluster mode): samples until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m emulation.cpuuse", description=main.__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--server", required=True, help="this server's name in the run")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    sampler = CpuSampler(args.run_dir, args.server).start()
    print(f"sampling the run's processes on {args.server} into {sampler.path}", flush=True)
    while not stopping.wait(0.5):
        pass
    sampler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
