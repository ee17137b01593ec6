"""Run one rank's schedule over TCP, chunked and pipelined.

Each op is cut into pieces of at most `chunk` elements. A piece waits only for the pieces of
earlier steps that touch the same elements (a send for the receives that produced its data; a
receive for earlier writes and reads of what it overwrites), so chunk k of step s+1 leaves as soon
as chunk k of step s is reduced: the ring and the tree pipeline across steps as NCCL does (a
`serial` op also waits for every piece of the phases before it: hier-serial's baseline).

Per connection (a peer and a channel: the ops' `channel`) there is one sender and one receiver
thread, each working through its pieces in schedule order; both ends of a connection list the same
pieces in the same order, so the byte stream needs no framing. Every step's first start and last
end are recorded, and how much of it was the rank's own work on the data (reduce or copy, after
the data and its dependencies were there): a slow host shows there, whatever the network does
(fault localisation, controller/localizer.py). An injected compute delay (`ComputeDelay`)
lengthens that work, as a straggling GPU would.
"""

from __future__ import annotations

import bisect
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from workloads.allreduce.schedule import Op

DEFAULT_CHUNK_BYTES = 256 << 10  # 8 ranks, 8 MB, 20 Mbit/s: 128K 83%, 256K 89%, 512K 88%, 1M 80% of the link


class PeerError(RuntimeError):
    """A peer connection failed or closed during an all-reduce."""


@dataclass
class Piece:
    op: Op
    start: int
    stop: int
    deps: list[int] = field(default_factory=list)


def cut(ops: list[Op], chunk: int) -> list[Piece]:
    """The pieces of `ops`, in schedule order, with their dependencies (indices into the list)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 element, got {chunk}")
    pieces = [Piece(op, a, min(a + chunk, op.stop)) for op in ops for a in range(op.start, op.stop, chunk)]
    bounds = sorted({b for p in pieces for b in (p.start, p.stop)})
    writer: list[int | None] = [None] * len(bounds)  # per elementary interval [bounds[i], bounds[i+1])
    readers: list[list[int]] = [[] for _ in bounds]
    by_step: dict[int, list[int]] = {}
    by_phase: dict[int, list[int]] = {}
    for i, p in enumerate(pieces):
        by_step.setdefault(p.op.step, []).append(i)
        by_phase.setdefault(p.op.phase, []).append(i)
    for step in sorted(by_step):
        members = by_step[step]
        spans = {i: range(bisect.bisect_left(bounds, pieces[i].start), bisect.bisect_left(bounds, pieces[i].stop))
                 for i in members}
        for i in members:  # against the state after the previous steps
            deps: set[int] = set()
            for e in spans[i]:
                w = writer[e]
                if w is not None:
                    deps.add(w)
                if not pieces[i].op.send:
                    deps.update(readers[e])
            if pieces[i].op.serial:  # the whole phase before, on this rank, first
                deps.update(j for phase, members_of in by_phase.items() if phase < pieces[i].op.phase
                            for j in members_of)
            pieces[i].deps = sorted(deps)
        for i in members:
            for e in spans[i]:
                if pieces[i].op.send:
                    readers[e].append(i)
                else:
                    writer[e] = i
                    readers[e] = []
    return pieces


@dataclass
class StepTiming:
    step: int
    send: bool
    peer: int
    bytes: int
    start: float  # time.monotonic() of the first piece
    end: float
    compute: float = 0.0  # seconds of the rank's own work on the step's pieces (receives: reduce or copy)


PieceDone = Callable[[Piece, int, float, float, float], None]  # piece, bytes, start, end, work (s)


@dataclass
class ComputeDelay:
    """An injected fault: every received piece's reduce or copy takes `seconds` longer (a slow host)."""

    seconds: float = 0.0


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("connection closed by the peer")
        got += n


Channel = tuple[int, int]  # (peer rank, channel): one connection


class Executor:
    """Runs a rank's pieces over `conns` ((peer rank, channel) → connected socket)."""

    def __init__(self, pieces: list[Piece], conns: dict[Channel, socket.socket], chunk: int,
                 delay: ComputeDelay | None = None, on_piece: PieceDone | None = None) -> None:
        """delay: injected compute delay (a slow host); on_piece(piece, bytes, start, end, work): told of every
        piece as it completes, from the thread that moved it (step timings reported as they happen)."""
        self.pieces = pieces
        self.conns = conns
        self.chunk = chunk
        self.delay = delay or ComputeDelay()
        self.on_piece = on_piece
        missing = {(p.op.peer, p.op.channel) for p in pieces} - set(conns)
        if missing:
            raise ValueError(f"no connection to (peer rank, channel) {sorted(missing)}")

    def run(self, buf: np.ndarray) -> list[StepTiming]:
        pieces = self.pieces
        done = [threading.Event() for _ in pieces]
        failed = threading.Event()
        errors: list[str] = []
        times: list[tuple[float, float] | None] = [None] * len(pieces)
        work = [0.0] * len(pieces)
        raw = memoryview(buf).cast("B")  # type: ignore[arg-type]  # numpy arrays are buffers
        itemsize = buf.itemsize

        def wait_deps(i: int) -> None:
            for d in pieces[i].deps:
                while not done[d].wait(0.5):
                    if failed.is_set():
                        raise PeerError("another transfer of this rank failed")

        def sender(conn: Channel, mine: list[int]) -> None:
            sock = self.conns[conn]
            for i in mine:
                wait_deps(i)
                p = pieces[i]
                t0 = time.monotonic()
                sock.sendall(raw[p.start * itemsize:p.stop * itemsize])
                end = time.monotonic()
                times[i] = (t0, end)
                done[i].set()
                if self.on_piece:
                    self.on_piece(p, (p.stop - p.start) * itemsize, t0, end, 0.0)

        def receiver(conn: Channel, mine: list[int]) -> None:
            sock = self.conns[conn]
            scratch = np.empty(self.chunk, dtype=buf.dtype)
            sview = memoryview(scratch).cast("B")  # type: ignore[arg-type]
            for i in mine:
                p = pieces[i]
                n = p.stop - p.start
                t0 = time.monotonic()
                _recv_exact(sock, sview[:n * itemsize])
                wait_deps(i)
                ready = time.monotonic()
                if self.delay.seconds > 0:
                    time.sleep(self.delay.seconds)
                if p.op.reduce:
                    np.add(buf[p.start:p.stop], scratch[:n], out=buf[p.start:p.stop])
                else:
                    buf[p.start:p.stop] = scratch[:n]
                end = time.monotonic()
                times[i] = (t0, end)
                work[i] = end - ready
                done[i].set()
                if self.on_piece:
                    self.on_piece(p, n * itemsize, t0, end, work[i])

        def guarded(target: Callable[[Channel, list[int]], None], conn: Channel, mine: list[int], what: str) -> None:
            try:
                target(conn, mine)
            except PeerError:
                pass
            except (OSError, ConnectionError) as exc:
                errors.append(f"{what} rank {conn[0]}{f' (channel {conn[1]})' if conn[1] else ''}: {exc}")
                failed.set()

        threads = []
        for conn in sorted(self.conns):
            sends = [i for i, p in enumerate(pieces) if (p.op.peer, p.op.channel) == conn and p.op.send]
            recvs = [i for i, p in enumerate(pieces) if (p.op.peer, p.op.channel) == conn and not p.op.send]
            if sends:
                threads.append(threading.Thread(target=guarded, args=(sender, conn, sends, "sending to"), daemon=True))
            if recvs:
                threads.append(threading.Thread(target=guarded, args=(receiver, conn, recvs, "receiving from"),
                                                daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors or failed.is_set():
            raise PeerError("; ".join(errors) or "a transfer failed")
        return step_timings(pieces, times, work, itemsize)


def step_timings(pieces: list[Piece], times: list[tuple[float, float] | None], work: list[float],
                 itemsize: int) -> list[StepTiming]:
    steps: dict[tuple[int, bool, int], StepTiming] = {}
    for p, t, w in zip(pieces, times, work, strict=True):
        if t is None:
            continue
        key = (p.op.step, p.op.send, p.op.peer)
        s = steps.get(key)
        if s is None:
            steps[key] = StepTiming(p.op.step, p.op.send, p.op.peer, (p.stop - p.start) * itemsize, t[0], t[1], w)
        else:
            s.bytes += (p.stop - p.start) * itemsize
            s.start = min(s.start, t[0])
            s.end = max(s.end, t[1])
            s.compute += w
    return sorted(steps.values(), key=lambda s: (s.step, not s.send, s.peer))
