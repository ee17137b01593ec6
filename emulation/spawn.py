"""Starting and stopping the testbed's processes, through one interface.

`Spawner` is that interface: start a process — in the root namespace, or inside a Mininet host's
namespaces — with its output in a log file, recorded in the run directory (pids/<label>.pid, with
its start time) so `make clean` ends it if the run dies; put it under real-time scheduling
(`promote`); stop it (SIGTERM, SIGKILL after a grace period, reaped, its record removed).
`LocalSpawner` runs processes on this machine; a placement on other machines (cluster mode,
emulation/cluster.py) implements the same calls. Switch processes, the controller, the
real-time watchdog, host agents, samplers and workload ranks all start and stop here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from emulation.rundir import stop_process
from wire.realtime import promote
from wire.runfiles import forget_pid, record_pid


class SpawnError(RuntimeError):
    pass


class Spawner(Protocol):
    def add_hosts(self, pids: Mapping[str, int]) -> None:
        """The hosts processes may start in: name → the PID that holds its namespaces."""
        ...

    def start(self, label: str, argv: list[str], log: Path | None = None, host: str | None = None,
              new_session: bool = False) -> subprocess.Popen:
        """Start argv (in `host`'s namespaces, or the root namespace), output appended to `log`
        (None: discarded), recorded under `label`; new_session: its own session (no terminal signals)."""
        ...

    def stop(self, label: str, proc: subprocess.Popen, grace_s: float = 5.0) -> int:
        """End a process start() started, reap it and drop its record; its exit status."""
        ...

    def command_prefix(self, shared: bool = True) -> list[str]:
        """The argv prefix that runs one shell command line in the root namespace where start() starts
        processes: [] for this machine's; ssh for another server's (emulation/rundir.remote_prefix)."""
        ...

    def promote(self, label: str, proc: subprocess.Popen, priority: int) -> None:
        """Every thread of the process started under `label` at SCHED_FIFO `priority`, on its machine;
        wire.realtime.RealtimeError when it may not be."""
        ...

    def placed(self, label: str, proc: subprocess.Popen) -> tuple[Spawner, int]:
        """The spawner of the machine the process runs on (its `server`: "localhost" for this one) and
        its PID there (the real-time watchdog watches it on that machine)."""
        ...

    @property
    def server(self) -> str:
        """The machine start() starts processes on ("localhost": this one)."""
        ...

    @property
    def socket_dir(self) -> Path | None:
        """Where a Unix socket served here to the processes start() starts must be (then `share` it):
        None, anywhere (they run on this machine); a directory of the same path on every machine when
        some run on another (the run directory is shared as NFS shares it: no socket is reached through
        it from another machine)."""
        ...

    def share(self, label: str, path: Path) -> Callable[[], None]:
        """Make the Unix socket served here at `path` (in socket_dir) reachable at the same path by the
        processes start() starts (on another server: forwarded to here over SSH); returns the undo."""
        ...


class LocalSpawner:
    """Processes on this machine; a host's are attached to its namespaces with Mininet's mnexec."""

    def __init__(self, run_dir: Path, host_pids: Mapping[str, int] | None = None) -> None:
        self.run_dir = run_dir
        self.host_pids: dict[str, int] = dict(host_pids or {})

    def add_hosts(self, pids: Mapping[str, int]) -> None:
        self.host_pids.update(pids)

    def start(self, label: str, argv: list[str], log: Path | None = None, host: str | None = None,
              new_session: bool = False) -> subprocess.Popen:
        if host is not None:
            mnexec = shutil.which("mnexec")
            if mnexec is None:
                raise SpawnError("mnexec (Mininet) not found on PATH")
            if host not in self.host_pids:
                raise SpawnError(f"no host {host!r} to start {label} in")
            argv = [mnexec, "-da" if new_session else "-a", str(self.host_pids[host]), *argv]
        with (log or Path(os.devnull)).open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=new_session and host is None)
        record_pid(self.run_dir, label, proc.pid)
        return proc

    def stop(self, label: str, proc: subprocess.Popen, grace_s: float = 5.0) -> int:
        status = stop_process(proc, grace_s)
        forget_pid(self.run_dir, label)
        return status

    def command_prefix(self, shared: bool = True) -> list[str]:
        return []

    def promote(self, label: str, proc: subprocess.Popen, priority: int) -> None:
        promote(proc.pid, priority)

    def placed(self, label: str, proc: subprocess.Popen) -> tuple[Spawner, int]:
        return self, proc.pid

    @property
    def server(self) -> str:
        return "localhost"

    @property
    def socket_dir(self) -> Path | None:
        return None

    def share(self, label: str, path: Path) -> Callable[[], None]:
        return lambda: None
