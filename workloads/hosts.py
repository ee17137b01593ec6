"""Processes of a workload on the testbed's hosts, and the launcher's line to them.

Every workload (all-reduce ranks, flow generators) runs one process per host and steers them the
same way: the launcher listens on a Unix socket in the job's directory (Mininet hosts share the
filesystem), starts the processes through a Spawner (in host namespaces, or on loopback for tests),
and exchanges JSON lines with them. A process opens with {"hello": index, …}; an {"error": text}
from it ends the job with that text and the tails of the processes' logs; {"exit": true} ends it.

    group = ProcessGroup(endpoints, LocalSpawner(), workdir, name="j1")
    hellos = group.start(lambda i, ep, control: [sys.executable, "-m", "…", "--control", str(control)])
    group.broadcast({"go": 1})
    answers = [group.expect(i, "done") for i in range(group.size)]
    group.close()
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from emulation.rundir import stop_process
from wire.runfiles import unix_socket_path

START_TIMEOUT_S = 60.0
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


class JobError(RuntimeError):
    pass


def parse_size(text: str | int) -> int:
    """'8M' → 8388608 bytes (K, M, G are powers of 1024, as in nccl-tests)."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"size: cannot read {text!r} (e.g. 1024, 64K, 8M, 1G)")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()])


def format_size(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


@dataclass(frozen=True)
class Endpoint:
    """A workload process's host: name (Mininet host or 'localN'), ip (where it listens); a GPU in a
    multi-GPU server also has its server's name and its NVLink address (peers of its own server are
    reached there)."""

    name: str
    ip: str
    server: str | None = None
    nvlink: str | None = None


def local_endpoints(count: int) -> list[Endpoint]:
    return [Endpoint(f"local{i}", "127.0.0.1") for i in range(count)]


class Spawner(Protocol):
    def __call__(self, endpoint: Endpoint, argv: list[str], log_path: Path) -> subprocess.Popen: ...

    def release(self, proc: subprocess.Popen) -> None:
        """The process has ended."""

    def end(self, proc: subprocess.Popen) -> None:
        """End a process that would not exit (on its machine), and release it."""

    @property
    def socket_dir(self) -> Path | None:
        """Where the job's control socket must be (emulation/spawn.py's Spawner.socket_dir)."""

    def share(self, label: str, path: Path) -> Callable[[], None]:
        """The control socket at `path` reached by the processes on every machine; returns the undo."""


class LocalSpawner:
    """Processes of this machine (all on loopback): for tests and quick checks. new_session: each
    process leads a session and process group of its own (its children can be ended with it)."""

    def __init__(self, new_session: bool = False) -> None:
        self.new_session = new_session

    def __call__(self, endpoint: Endpoint, argv: list[str], log_path: Path) -> subprocess.Popen:
        with log_path.open("ab") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=self.new_session)

    def release(self, proc: subprocess.Popen) -> None:
        pass

    def end(self, proc: subprocess.Popen) -> None:
        stop_process(proc)

    @property
    def socket_dir(self) -> Path | None:
        return None

    def share(self, label: str, path: Path) -> Callable[[], None]:
        return lambda: None


ArgvOf = Callable[[int, Endpoint, Path], list[str]]


def NOTHING() -> None:  # noqa: N802 (a constant: nothing to undo)
    return None


class ProcessGroup:
    """One process per endpoint, steered over JSON lines on a Unix socket.

    endpoints: in index order; spawner: starts a process on its host; workdir: logs and the control
    socket; kind: what a process is called in errors ("rank", "agent"); timeout_s: how long a
    process may stay silent when an answer is expected."""

    def __init__(self, endpoints: list[Endpoint], spawner: Spawner, workdir: Path, name: str, kind: str = "rank",
                 timeout_s: float = 120.0) -> None:
        self.endpoints = endpoints
        self.spawner = spawner
        self.workdir = workdir
        self.name = name
        self.kind = kind
        self.timeout_s = timeout_s
        self.procs: list[subprocess.Popen] = []
        self.conns: list[socket.socket] = []
        self.readers: list[TextIO] = []
        self._server: socket.socket | None = None
        self._path: Path | None = None
        self._tmp: Path | None = None
        self._unshare: Callable[[], None] = NOTHING  # the control socket's forwards to other servers

    @property
    def size(self) -> int:
        return len(self.endpoints)

    def log_path(self, index: int) -> Path:
        return self.workdir / f"{self.kind}{index}-{self.endpoints[index].name}.log"

    def start(self, argv_of: ArgvOf) -> list[dict]:
        """Start every process (argv_of(index, endpoint, control socket)) and return their hellos in
        index order; on any failure, end what started and raise JobError."""
        try:
            return self._start(argv_of)
        except BaseException:
            self.close()
            raise

    def _start(self, argv_of: ArgvOf) -> list[dict]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        shared = self.spawner.socket_dir  # some processes on another server: a path of every machine's
        path, self._tmp = unix_socket_path(shared / f"job-{self.name}-{self.kind}.sock" if shared is not None
                                           else self.workdir / "control.sock")
        path.unlink(missing_ok=True)
        self._path = path
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(self.size)
        self._server = server
        self._unshare = self.spawner.share(f"job-{self.name}", path)
        for index, ep in enumerate(self.endpoints):
            self.procs.append(self.spawner(ep, argv_of(index, ep, path), self.log_path(index).with_suffix(".out")))
        by_index: dict[int, tuple[socket.socket, TextIO, dict]] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(by_index) < self.size:
            server.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
            try:
                conn, _ = server.accept()
            except TimeoutError:
                self.check_alive("starting")
                if time.monotonic() > deadline:
                    raise JobError(f"job {self.name}: only {len(by_index)} of {self.size} {self.kind}s started "
                                   f"within {START_TIMEOUT_S:.0f} s{self.logs()}") from None
                continue
            conn.settimeout(self.timeout_s)
            reader = conn.makefile("r")
            hello = self.read(reader, -1)
            if "error" in hello:
                conn.close()
                raise JobError(f"job {self.name}: {hello['error']}{self.logs()}")
            by_index[hello["hello"]] = (conn, reader, hello)
        self.conns = [by_index[i][0] for i in range(self.size)]
        self.readers = [by_index[i][1] for i in range(self.size)]
        return [by_index[i][2] for i in range(self.size)]

    def close(self) -> None:
        """Tell every process to exit, wait for it (then terminate, then kill), remove the socket."""
        for conn in self.conns:
            try:
                conn.sendall(b'{"exit": true}\n')
            except OSError:
                pass
        for proc in self.procs:
            try:
                proc.wait(10)
                self.spawner.release(proc)
            except subprocess.TimeoutExpired:
                self.spawner.end(proc)
        for conn in self.conns:
            conn.close()
        self.conns, self.readers, self.procs = [], [], []
        if self._server is not None:
            self._server.close()
            self._server = None
        self._unshare()
        self._unshare = NOTHING
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None
        if self._tmp is not None:
            self._tmp.rmdir()
            self._tmp = None

    def broadcast(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        for index in range(len(self.conns)):
            self._send(index, data)

    def send(self, index: int, message: dict) -> None:
        self._send(index, (json.dumps(message) + "\n").encode())

    def _send(self, index: int, data: bytes) -> None:
        try:
            self.conns[index].sendall(data)
        except OSError as exc:
            raise JobError(f"job {self.name}: {self.kind} {index} ({self.endpoints[index].name}) is gone: {exc}"
                           f"{self.logs()}") from exc

    def read(self, reader: TextIO, index: int) -> dict:
        try:
            line = reader.readline()
        except TimeoutError:
            raise JobError(f"job {self.name}: {self.kind} {index} ({self.endpoints[index].name}) silent for "
                           f"{self.timeout_s:.0f} s{self.logs()}") from None
        if not line:
            raise JobError(f"job {self.name}: {self.kind} {index} exited{self.logs()}")
        return json.loads(line)

    def expect(self, index: int, key: str) -> dict:
        message = self.read(self.readers[index], index)
        if "error" in message:
            raise JobError(f"job {self.name}: {message['error']}{self.logs()}")
        if key not in message:
            raise JobError(f"job {self.name}: {self.kind} {index} sent {message!r}, expected {key!r}")
        return message

    def check_alive(self, what: str) -> None:
        for index, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise JobError(f"job {self.name}: {self.kind} {index} ({self.endpoints[index].name}) exited "
                               f"({proc.returncode}) while {what}{self.logs()}")

    def logs(self) -> str:
        tails = []
        for index in range(self.size):
            for path in (self.log_path(index), self.log_path(index).with_suffix(".out")):
                if path.exists() and path.stat().st_size:
                    lines = path.read_text(errors="replace").strip().splitlines()[-3:]
                    tails.append(f"  {path.name}: " + "\n    ".join(lines))
        return ("\n" + "\n".join(tails)) if tails else ""


class Control:
    """A workload process's end of the line to its launcher."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("r")

    def send(self, message: dict) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def recv(self) -> dict:
        line = self.reader.readline()
        if not line:
            raise SystemExit("the launcher went away")
        return json.loads(line)


class BackgroundJob:
    """A workload the CLI runs in the foreground or on a thread of its own, and can describe at any
    time: run(progress) does the work and returns its outcome; summary(outcome, full) describes it."""

    def __init__(self, name: str, work: Callable[[Callable[[str], None]], object],
                 summary: Callable[[object, bool], str]) -> None:
        self.name = name
        self._work = work
        self._summary = summary
        self.outcome: object | None = None
        self.error: str | None = None
        self.progress = "starting"
        self._thread: threading.Thread | None = None

    def run(self, progress: Callable[[str], None] | None = None) -> None:
        def note(text: str) -> None:
            self.progress = text
            if progress:
                progress(text)

        try:
            self.outcome = self._work(note)
        except (JobError, OSError, RuntimeError, ValueError) as exc:
            self.error = str(exc)

    def start(self) -> BackgroundJob:
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """True when the job has ended (the foreground run, or its thread, is over)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return self.outcome is not None or self.error is not None

    def describe(self, full: bool = False) -> str:
        if self.error:
            return f"{self.name}: failed: {self.error}"
        if self.outcome is None:
            return f"{self.name}: running — {self.progress}"
        return self._summary(self.outcome, full)
