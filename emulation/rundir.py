"""Run directories (runs/<timestamp>-<name>/, or under $STARNET_RUNS) and the PID/interface records
that `make clean` uses.

Every process the testbed starts is recorded as ``pids/<label>.pid`` holding its PID and its
kernel start time, so cleanup ends exactly those processes (a reused PID is left alone); every
interface it creates is listed in ``interfaces.txt`` and every named network namespace in
``netns.txt``. Nothing is ever found by name pattern.

Interfaces are the machine's, run directories a checkout's: a testbed killed in one clone (SIGKILL,
a session's end) leaves its switch ports in the root namespace, where the next testbed of any clone
would meet them ("File exists"). So every live testbed also registers its run directory with its
owner (PID and start time) under ``LIVE`` (/run/starnet/live, a tmpfs gone at reboot like the
interfaces): a starting testbed cleans the run of every entry whose owner is gone
(``reap_orphans``), and names the live run that holds an interface it needs (``holder_of``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

from wire import runfiles
from wire.runfiles import process_start_time

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Where run directories go: runs/ in the source tree, or any directory STARNET_RUNS names (a
# scratch disk, a directory shared between machines, a read-only checkout's outside).
RUNS = Path(os.environ["STARNET_RUNS"]).resolve() if os.environ.get("STARNET_RUNS") else PROJECT_ROOT / "runs"
# Where live testbeds register, machine-wide (STARNET_LIVE for tests that must not see the real one).
LIVE = Path(os.environ.get("STARNET_LIVE", "/run/starnet/live"))


def new_run_dir(name: str, base: Path = RUNS) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = base / f"{stamp}-{name}"
    (path / runfiles.PIDS).mkdir(parents=True)
    (path / runfiles.SWITCH_DIR).mkdir()
    return path


def record_interfaces(run_dir: Path, names: list[str]) -> None:
    with (run_dir / runfiles.INTERFACES).open("a") as f:
        for name in names:
            f.write(name + "\n")


def record_netns(run_dir: Path, names: list[str]) -> None:
    with (run_dir / runfiles.NETNS).open("a") as f:
        for name in names:
            f.write(name + "\n")


def _alive_as_recorded(pid: int, start: str) -> bool:
    return process_start_time(pid) == start


def stop_process(proc: subprocess.Popen, grace_s: float = 5.0) -> int:
    """End a child this run started: SIGTERM, SIGKILL after grace_s, reaped; its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def end_process(pid: int, start: str, grace_s: float = 2.0) -> bool:
    """SIGTERM, then SIGKILL after grace_s, the process `pid` if it is still the one recorded."""
    if not _alive_as_recorded(pid, start):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive_as_recorded(pid, start):
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def end_namespace_processes(netns: str, grace_s: float = 1.0) -> list[int]:
    """End every process in the named network namespace `netns` (one this project made: what runs in it
    is a run's — a namespace server's sshd sessions, say); they would keep it alive past `ip netns del`."""
    listed = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    ended = []
    for pid in map(int, listed):
        start = process_start_time(pid)
        if start is not None and end_process(pid, start, grace_s):
            ended.append(pid)
    return ended


START_TIME = "awk '{{sub(/.*\\) /, \"\"); print $20}}' /proc/{pid}/stat"  # field 22: the 20th after "(comm) "


CONTROL_DIR = Path("/run/starnet/ssh")  # the shared ssh connections' sockets (ControlPath), machine-wide


def control_dir() -> Path:
    """CONTROL_DIR, made when a connection is about to be opened (writing a config makes nothing)."""
    CONTROL_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    return CONTROL_DIR


def remote_prefix(run_dir: Path, server: str, shared: bool = True) -> list[str]:
    """The argv prefix that runs one shell command line on a server of the run's cluster by ssh, with
    the run's ssh_config (emulation/cluster.py writes it). shared: over the server's one shared
    connection (a command costs a round trip; CONTROL_DIR made for its socket); False, a connection of
    its own — for a stream that lives as long as the run (the shared connection's master would hold
    its pipes open after it ends)."""
    if shared:
        control_dir()
    return ["ssh", "-F", str(run_dir / runfiles.SSH_CONFIG), *([] if shared else ["-S", "none"]), server, "--"]


def remote_command(run_dir: Path, server: str, argv: list[str]) -> list[str]:
    """argv run on a server of the run's cluster by ssh (remote_prefix); one shell-quoted command line,
    as ssh joins its words for the far shell."""
    return [*remote_prefix(run_dir, server), shlex.join(argv)]


def still_running(pid: int, start: str) -> str:
    """A shell test, true while `pid` on the server it runs on is the process started at `start`
    (a PID reused since fails it)."""
    return f'[ "$({START_TIME.format(pid=pid)} 2>/dev/null)" = {shlex.quote(start)} ]'


PROCESS_GROUP = "awk '{{sub(/.*\\) /, \"\"); print $3}}' /proc/{pid}/stat"  # field 5, pgrp: the 3rd after "(comm) "


def end_remote_process(run_dir: Path, server: str, pid: int, start: str, grace_s: float = 2.0,
                       orphans: bool = False) -> bool:
    """end_process on a server of the run's cluster (over SSH): True if the process recorded was there.
    A process that leads its process group (every one ServerSpawner starts: sshd gives each a session)
    is ended with its group — what it started (a job's workers) goes with it. orphans: when it has
    ended already, what is left of its group is ended still (for a process seen running moments ago:
    a group outlives its leader, and its number is not given to another while it does). OSError if
    the server cannot be reached."""
    check = still_running(pid, start)  # (dash's kill takes no `--`: a group is `kill -SIG -PGID`)
    gone = f"{{ kill -KILL -{pid} 2>/dev/null; exit 3; }}" if orphans else "exit 3"
    script = (f"{check} || {gone}; target={pid}; "
              f'[ "$({PROCESS_GROUP.format(pid=pid)} 2>/dev/null)" = {pid} ] && target=-{pid}; '
              f"kill -TERM $target; i=0; while {check} && [ $i -lt {int(grace_s * 20)} ]; "
              f"do sleep 0.05; i=$((i+1)); done; {check} && kill -KILL $target; "
              f'[ "$target" = -{pid} ] && kill -KILL $target 2>/dev/null; exit 0')
    try:
        done = subprocess.run(remote_command(run_dir, server, ["sh", "-c", script]), capture_output=True, text=True,
                              timeout=grace_s + 15)
    except subprocess.TimeoutExpired:
        raise OSError(f"{server}: no answer over SSH") from None
    if done.returncode not in (0, 3):
        raise OSError(f"{server}: {done.stderr.strip() or f'ssh exit {done.returncode}'}")
    return done.returncode == 0


def clean_run(run_dir: Path) -> list[str]:
    """End recorded processes, delete recorded interfaces and namespaces of one run; say what was done."""
    done = []
    for records in sorted((run_dir / runfiles.REMOTE_PIDS).glob("*")):  # on the run's servers, first: they go through
        # the run's local processes (a namespace server's sshd)
        for pid_file in sorted(records.glob("*.pid")):
            try:
                pid_text, start = pid_file.read_text().split()
                if end_remote_process(run_dir, records.name, int(pid_text), start):
                    done.append(f"ended {pid_file.stem} on {records.name} (pid {pid_text})")
            except (ValueError, OSError) as exc:
                done.append(f"could not end {pid_file.stem} on {records.name}: {exc}")
            pid_file.unlink(missing_ok=True)
    for pid_file in sorted((run_dir / runfiles.PIDS).glob("*.pid")):
        try:
            pid_text, start = pid_file.read_text().split()
            pid = int(pid_text)
        except FileNotFoundError:  # its owner forgot it meanwhile (a teardown running beside us)
            continue
        except ValueError:
            pid_file.unlink(missing_ok=True)
            continue
        if end_process(pid, start):
            done.append(f"ended {pid_file.stem} (pid {pid})")
        pid_file.unlink(missing_ok=True)
    # Interfaces first: deleting a veth end in the root namespace removes its peer in a namespace.
    for listing, exists, delete, what in (
        (runfiles.INTERFACES, "/sys/class/net/{}", ["ip", "link", "del"], "interface"),
        (runfiles.NETNS, "/run/netns/{}", ["ip", "netns", "del"], "network namespace"),
    ):
        path = run_dir / listing
        if not path.exists():
            continue
        for name in path.read_text().split():
            if Path(exists.format(name)).exists():
                if listing == runfiles.NETNS:
                    done += [f"ended pid {pid} in {name}" for pid in end_namespace_processes(name)]
                subprocess.run([*delete, name], capture_output=True)
                done.append(f"deleted {what} {name}")
        path.unlink(missing_ok=True)  # (a teardown running beside us may have removed it)
    sockets = runfiles.cluster_sockets(run_dir)  # cluster mode: the sockets this machine served to servers
    if sockets.is_dir():
        shutil.rmtree(sockets, ignore_errors=True)
        done.append(f"removed {sockets}")
    return done


def clean_all(base: Path = RUNS) -> list[str]:
    """Clean every run under base, and the orphans of any checkout (their owners gone)."""
    done = reap_orphans()
    if base.exists():
        for run_dir in sorted(base.iterdir()):
            if (run_dir / runfiles.PIDS).is_dir():
                done += clean_run(run_dir)
    return done


def register(run_dir: Path, live: Path = LIVE) -> None:
    """Record, machine-wide, that this process owns the testbed of run_dir (see the module's doc)."""
    live.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    (live / run_dir.name).write_text(f"{pid} {process_start_time(pid) or '?'}\n{run_dir.resolve()}\n")


def unregister(run_dir: Path, live: Path = LIVE) -> None:
    (live / run_dir.name).unlink(missing_ok=True)


def _entries(live: Path) -> list[tuple[Path, bool, Path]]:
    """Each registered run: (entry, its owner is alive, its run directory)."""
    entries = []
    for entry in sorted(live.iterdir()) if live.is_dir() else []:
        try:
            owner, path = entry.read_text().splitlines()[:2]
            pid_text, start = owner.split()
            entries.append((entry, _alive_as_recorded(int(pid_text), start), Path(path)))
        except FileNotFoundError:  # unregistered meanwhile
            continue
        except ValueError:  # a half-written entry of a process killed while writing it
            entries.append((entry, False, Path("/nonexistent")))
    return entries


def reap_orphans(live: Path = LIVE) -> list[str]:
    """Clean the run of every registered testbed whose owning process is gone; say what was done."""
    done = []
    for entry, alive, run_dir in _entries(live):
        if alive:
            continue
        cleaned = clean_run(run_dir) if (run_dir / runfiles.PIDS).is_dir() else []
        if cleaned:
            done.append(f"cleaned what {run_dir} left (its owner is gone): " + "; ".join(cleaned))
        entry.unlink(missing_ok=True)
    return done


def holder_of(name: str, live: Path = LIVE) -> Path | None:
    """The run directory of the live testbed that created interface `name`, if one did."""
    for _entry, alive, run_dir in _entries(live):
        listing = run_dir / runfiles.INTERFACES
        if alive and listing.exists() and name in listing.read_text().split():
            return run_dir
    return None
