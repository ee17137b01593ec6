"""The web front: `/metrics` and the live page answered by a process of its own, beside the controller.

    python -m controller.front --run-dir runs/<id> --fd N [--metrics-port P] [--web-port Q] [--fidelity F]

Why a process: a scrape or a page served by threads of the controller waits for Python's interpreter
lock while the controller's event loop, or a rendering, holds it. Measured on a k=4 fat-tree with the
servers in the controller (tests/integration/test_fattree.py, a loaded machine): a scrape of an
already rendered text took a median 115 ms and 650 ms at p99. Here the front renders the text and
builds the pages' frames; the controller only copies its parts' state on its event loop when the
front asks (controller/metrics.py: FabricState, as before) and pickles it down a socket pair.

The controller's side is `Front`: it starts this process with one end of a Unix socket pair (and
records it in the run directory, pids/front.pid), waits for its ports ("R" message) and answers its
state requests in a thread of its own. The front asks only while scraped (once a second, metrics.Exposition)
or while a page watches (every 100 ms, live.LiveServer); nothing runs while nobody looks.

Messages on the pair: a kind byte, a 4-byte big-endian length, the payload.
    front → controller  R {"metrics_port":..,"web_port":..}   ready (JSON)
                        H / L                                  a state with / without histograms, please
    controller → front  S pickle(FabricState)                  the state
                        E text                                 no state (the loop did not answer in time)

The front runs at normal priority (an observer must not take the emulation's CPU from it); it ends on
SIGTERM or when the controller's end of the pair closes, and logs to the run directory's front.log.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from controller.metrics import FabricState
from wire import runfiles

log = logging.getLogger("controller.front")
HEADER = struct.Struct("!cI")
START_TIMEOUT_S = 30.0  # the front's interpreter, prometheus_client and the topology loaded, on a busy machine
ANSWER_TIMEOUT_S = 10.0  # the controller answers a request in SCRAPE_TIMEOUT_S (an "E" if its loop is stuck)
LABEL = "front"  # pids/front.pid, and its kind in cpu.csv
# A request handled while the renderer runs takes the interpreter lock back after every system call,
# each time waiting for the renderer's slice to end: slices of 1 ms instead of Python's 5 keep that wait short.
SWITCH_INTERVAL_S = 0.001


class FrontError(RuntimeError):
    """The web front did not start, or its controller stopped answering."""


def send(sock: socket.socket, kind: bytes, payload: bytes = b"") -> None:
    sock.sendall(HEADER.pack(kind, len(payload)) + payload)


def receive(sock: socket.socket) -> tuple[bytes, bytes]:
    """One message; EOFError when the other end closed."""
    kind, length = HEADER.unpack(_exactly(sock, HEADER.size))
    return kind, _exactly(sock, length)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other end of the front's socket pair closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# ---- the controller's side --------------------------------------------------------------------------------
class Front:
    """Starts the front process and answers its state requests: `read(histograms)` runs in this side's
    thread and returns the controller's state (controller/app.py: a copy taken on the event loop)."""

    def __init__(self, run_dir: Path, read: Callable[[bool], FabricState], metrics_port: int | None,
                 web_port: int | None, fidelity: Path | None = None) -> None:
        self.run_dir = run_dir
        self.read = read
        self.metrics_port, self.web_port = metrics_port, web_port
        self.fidelity = fidelity
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.served: dict[str, int | None] = {}

    def launch(self) -> Front:
        """Start the front process (its interpreter takes a while: `wait_ready` collects its ports)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-m", "controller.front", "--run-dir", str(self.run_dir), "--fd", str(theirs.fileno()),
                "--metrics-port", str(-1 if self.metrics_port is None else self.metrics_port),
                "--web-port", str(-1 if self.web_port is None else self.web_port)]
        if self.fidelity is not None:
            argv += ["--fidelity", str(self.fidelity)]
        with (self.run_dir / runfiles.FRONT_LOG).open("a") as log_file:  # a traceback at start lands there too
            self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=log_file, stderr=log_file)
        theirs.close()
        self.sock = ours
        runfiles.record_pid(self.run_dir, LABEL, self.proc.pid)
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, int | None]:
        """The front's ports once it serves (`served`: metrics_port, web_port; None: not served);
        FrontError, with the end of its log, when it does not come up."""
        assert self.sock is not None and self.proc is not None, "launch() first"
        self.sock.settimeout(timeout_s)
        try:
            kind, payload = receive(self.sock)
        except (EOFError, TimeoutError, OSError) as exc:
            self.stop()
            raise FrontError(f"the web front did not start ({exc}): {self._log_tail()}") from exc
        if kind != b"R":
            self.stop()
            raise FrontError(f"the web front said {kind!r} where it should say it is ready")
        self.served = json.loads(payload)
        self.sock.settimeout(None)
        self.thread = threading.Thread(target=self._answer, name="front-states", daemon=True)
        self.thread.start()
        log.info("web front (pid %d): /metrics on port %s, the live page on port %s", self.proc.pid,
                 self.served.get("metrics_port"), self.served.get("web_port"))
        return self.served

    def _answer(self) -> None:
        assert self.sock is not None
        while True:
            try:
                kind, _ = receive(self.sock)
            except (EOFError, OSError):
                if not self.stopping:
                    code = self.proc.poll() if self.proc is not None else None
                    log.error("the web front ended (exit code %s): /metrics and the live page are gone; see %s",
                              code, runfiles.FRONT_LOG)
                return
            try:
                state = self.read(kind == b"H")
                reply = (b"S", pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as exc:  # the loop did not copy its state in time: the front's next ask may
                reply = (b"E", f"{type(exc).__name__}: {exc}".encode())
            try:
                send(self.sock, *reply)
            except OSError:
                return

    def stop(self) -> None:
        """End the front (SIGTERM, then SIGKILL after 5 s) and its thread here."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                log.error("the web front (pid %d) did not end on SIGTERM within 5 s: killed", self.proc.pid)
                self.proc.kill()
                self.proc.wait()
        if self.sock is not None:
            self.sock.close()
        if self.thread is not None:
            self.thread.join(5)
        runfiles.forget_pid(self.run_dir, LABEL)

    def _log_tail(self) -> str:
        try:
            lines = (self.run_dir / runfiles.FRONT_LOG).read_text().strip().splitlines()
        except OSError:
            lines = []
        return " | ".join(lines[-3:]) or f"nothing in {runfiles.FRONT_LOG}"


# ---- the front's side -------------------------------------------------------------------------------------
class StateClient:
    """The controller's state, asked for over the socket pair; one request at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.broken: str | None = None
        sock.settimeout(ANSWER_TIMEOUT_S)

    def read(self, histograms: bool) -> FabricState:
        with self.lock:
            if self.broken:
                raise FrontError(self.broken)
            try:
                send(self.sock, b"H" if histograms else b"L")
                kind, payload = receive(self.sock)
            except (EOFError, TimeoutError, OSError) as exc:
                # a reply half read, or the controller gone: the pair cannot be trusted any more
                self.broken = f"the controller stopped answering ({type(exc).__name__}: {exc})"
                raise FrontError(self.broken) from exc
        if kind == b"E":
            raise FrontError(f"the controller had no state to give: {payload.decode()}")
        state = pickle.loads(payload)  # from our own parent, over a pair nobody else holds
        if not isinstance(state, FabricState):
            raise FrontError(f"the controller sent a {type(state).__name__}, not a FabricState")
        return state

    def closed(self) -> bool:
        """True once the controller's end has closed (looked at between requests)."""
        with self.lock:
            if self.broken:
                return True
            readable, _, _ = select.select([self.sock], [], [], 0)
            if not readable:
                return False
            try:
                return self.sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True


def _normal_priority() -> None:
    """Inherited real-time scheduling dropped: the front must not take the switches' CPU."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="controller.front", description="StarNet's /metrics and live page")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--fd", type=int, required=True, help="this end of the controller's socket pair")
    parser.add_argument("--metrics-port", type=int, default=-1, help="/metrics on 127.0.0.1:PORT (0: free; -1: none)")
    parser.add_argument("--web-port", type=int, default=-1, help="the live page on 127.0.0.1:PORT (0: free; -1: none)")
    parser.add_argument("--fidelity", type=Path, default=None, help="the run's fidelity.csv, followed")
    args = parser.parse_args(argv)
    logging.basicConfig(filename=args.run_dir / runfiles.FRONT_LOG, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # imported here: the controller's side above needs none of them
    from controller.live import LiveServer, following
    from controller.metrics import MetricsServer, serve
    from topologies.spec import load_topology
    from wire.fidelity import FidelityTail

    _normal_priority()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    sock = socket.socket(fileno=args.fd)
    client = StateClient(sock)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics: MetricsServer | None = None
    live: LiveServer | None = None
    try:
        if args.metrics_port >= 0:
            tail = FidelityTail(args.fidelity) if args.fidelity is not None else None
            metrics, _ = serve(lambda: client.read(True), args.metrics_port, tail)
        if args.web_port >= 0:
            topo = load_topology(args.run_dir / runfiles.TOPOLOGY)
            live = LiveServer(lambda: client.read(False), topo, args.web_port,
                              following(args.fidelity, args.run_dir / runfiles.FAULTS)).start()
        send(sock, b"R", json.dumps({"metrics_port": metrics.server_port if metrics else None,
                                     "web_port": live.server_port if live else None}).encode())
    except Exception as exc:
        log.error("the web front did not start: %s: %s", type(exc).__name__, exc)
        print(f"controller.front: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    log.info("serving: /metrics on 127.0.0.1:%s, the live page on 127.0.0.1:%s",
             metrics.server_port if metrics else "-", live.server_port if live else "-")
    code = 0
    while not stop.wait(1.0):
        if client.closed():
            if client.broken:
                log.error("%s: ending", client.broken)
                code = 1
            else:
                log.info("the controller closed its end: ending")
            break
    # No waiting for the servers' loops to notice (half a second each): their sockets closed, the pages'
    # streams told to end, the process ends with its daemon threads.
    if live is not None:
        live.hub.stop()
        live.server_close()
    if metrics is not None:
        metrics.server_close()
    log.info("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
