"""Start the ranks of an all-reduce job, drive its iterations and collect nccl-tests-style results.

    job = AllReduceJob(endpoints, LocalSpawner(), workdir, name="j1")
    with job:
        results = job.sweep(sizes_bytes=[1 << 20, 8 << 20], algo="ring", chunk_bytes=1 << 20, iters=5)
    print(format_table(results))

The ranks connect once (a full TCP mesh) and then run any number of (size, algorithm, chunk)
configurations — the sweep and the auto-tuner reuse one job. An iteration's time runs from the
earliest rank's start to the latest rank's end (CLOCK_MONOTONIC is shared by all namespaces).
"""

from __future__ import annotations

import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from workloads.allreduce.executor import DEFAULT_CHUNK_BYTES
from workloads.allreduce.schedule import ALGORITHMS

ITEMSIZE = 4  # float32
UNIX_PATH_MAX = 107
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


def size_range(begin: int, end: int, factor: int) -> list[int]:
    """nccl-tests' -b/-e/-f: begin, begin·f, … up to end."""
    if begin <= 0 or end < begin:
        raise ValueError(f"sizes: need 0 < begin <= end, got {begin} and {end}")
    if factor < 2:
        raise ValueError(f"-f: the step factor must be >= 2, got {factor}")
    sizes, size = [], begin
    while size <= end:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass(frozen=True)
class Endpoint:
    """A rank's host: name (Mininet host or 'local'), ip (where the rank listens)."""

    name: str
    ip: str


class Spawner(Protocol):
    def __call__(self, endpoint: Endpoint, argv: list[str], log_path: Path) -> subprocess.Popen: ...

    def release(self, proc: subprocess.Popen) -> None:
        """The process has ended."""


class LocalSpawner:
    """Ranks as processes of this machine (all on loopback): for tests and quick checks."""

    def __call__(self, endpoint: Endpoint, argv: list[str], log_path: Path) -> subprocess.Popen:
        with log_path.open("ab") as out:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def release(self, proc: subprocess.Popen) -> None:
        pass


@dataclass
class SizeResult:
    """One (size, algorithm, chunk) measurement over `iters` timed iterations."""

    size_bytes: int
    algo: str
    chunk_bytes: int
    world: int
    times_s: list[float]
    wrong: int
    steps: list[list] = field(default_factory=list)  # last iteration: [rank, step, send, peer, bytes, start, end]

    @property
    def count(self) -> int:
        return self.size_bytes // ITEMSIZE

    @property
    def time_s(self) -> float:
        return statistics.fmean(self.times_s)

    @property
    def algbw_gbs(self) -> float:
        return self.size_bytes / self.time_s / 1e9

    @property
    def busbw_gbs(self) -> float:
        """algbw · 2(n-1)/n: what each rank's link carries, comparable across world sizes (nccl-tests)."""
        return self.algbw_gbs * 2 * (self.world - 1) / self.world

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(count=self.count, type="float", redop="sum", time_us=self.time_s * 1e6,
                   algbw_gbs=self.algbw_gbs, busbw_gbs=self.busbw_gbs, busbw_mbps=self.busbw_gbs * 8e3)
        return out


def format_table(results: list[SizeResult], link_mbps: float | None = None) -> str:
    """The nccl-tests table (in-place columns), plus busbw in Mbit/s and as a share of the link rate."""
    head = (f"{'#':>1} {'size':>10} {'count':>10} {'type':>6} {'redop':>6} {'algo':>5} {'chunk':>6} "
            f"{'time':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7} {'busbw':>8}" + ("  of link" if link_mbps else ""))
    units = (f"{'#':>1} {'(B)':>10} {'(elements)':>10} {'':>6} {'':>6} {'':>5} {'(B)':>6} "
             f"{'(us)':>11} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7} {'(Mb/s)':>8}")
    lines = [head, units]
    for r in results:
        line = (f"  {r.size_bytes:>10} {r.count:>10} {'float':>6} {'sum':>6} {r.algo:>5} "
                f"{format_size(r.chunk_bytes):>6} {r.time_s * 1e6:>11.0f} {r.algbw_gbs:>8.4f} {r.busbw_gbs:>8.4f} "
                f"{r.wrong:>7} {r.busbw_gbs * 8e3:>8.2f}")
        if link_mbps:
            line += f"  {r.busbw_gbs * 8e3 / link_mbps:7.0%}"
        lines.append(line)
    wrong = sum(r.wrong for r in results)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    if results:
        lines.append(f"# Avg bus bandwidth    : {statistics.fmean(r.busbw_gbs for r in results):.4f} GB/s")
    return "\n".join(lines)


def _control_path(workdir: Path) -> tuple[Path, Path | None]:
    path = workdir / "control.sock"
    if len(str(path)) <= UNIX_PATH_MAX:
        return path, None
    short = Path(tempfile.mkdtemp(prefix="starnet-job-"))
    return short / "control.sock", short


class AllReduceJob:
    """endpoints: the ranks' hosts in rank order; spawner: starts a rank process on its host;
    workdir: rank logs and the control socket; controller: gRPC address for declared demands
    (None: none declared); cc: TCP congestion control; seed: of the input data."""

    def __init__(self, endpoints: list[Endpoint], spawner: Spawner, workdir: Path, name: str = "allreduce",
                 controller: str | None = None, cc: str | None = None, seed: int = 0,
                 timeout_s: float = 120.0, port_base: int = 0) -> None:
        if len(endpoints) < 2:
            raise JobError(f"job {name}: an all-reduce needs at least 2 ranks, got {len(endpoints)}")
        if len({e.name for e in endpoints}) != len(endpoints) and len({e.ip for e in endpoints}) > 1:
            raise JobError(f"job {name}: a host appears twice in {[e.name for e in endpoints]}")
        self.endpoints = endpoints
        self.spawner = spawner
        self.workdir = workdir
        self.name = name
        self.controller = controller
        self.cc = cc
        self.seed = seed
        self.timeout_s = timeout_s
        self.port_base = port_base
        self.procs: list[subprocess.Popen] = []
        self.conns: list[socket.socket] = []
        self.readers: list = []
        self.iteration = 0
        self._server: socket.socket | None = None
        self._path: Path | None = None
        self._tmp: Path | None = None

    @property
    def world(self) -> int:
        return len(self.endpoints)

    # ---- life cycle --------------------------------------------------------------------------
    def start(self) -> AllReduceJob:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path, self._tmp = _control_path(self.workdir)
        path.unlink(missing_ok=True)
        self._path = path
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(self.world)
        self._server = server
        for rank, ep in enumerate(self.endpoints):
            argv = [sys.executable, "-m", "workloads.allreduce.rank", "--control", str(path), "--rank", str(rank),
                    "--world", str(self.world), "--ip", ep.ip, "--seed", str(self.seed),
                    "--timeout-s", str(self.timeout_s), "--log-file", str(self._log(rank))]
            if self.cc:
                argv += ["--cc", self.cc]
            if self.controller:
                argv += ["--controller", self.controller]
            if self.port_base:
                argv += ["--port-base", str(self.port_base)]
            self.procs.append(self.spawner(ep, argv, self._log(rank).with_suffix(".out")))
        by_rank: dict[int, tuple[socket.socket, object, int]] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(by_rank) < self.world:
            server.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
            try:
                conn, _ = server.accept()
            except TimeoutError:
                self._check_alive("starting")
                if time.monotonic() > deadline:
                    raise JobError(f"job {self.name}: only {len(by_rank)} of {self.world} ranks started "
                                   f"within {START_TIMEOUT_S:.0f} s{self._logs()}") from None
                continue
            conn.settimeout(self.timeout_s)
            reader = conn.makefile("r")
            hello = self._read(reader, -1)
            by_rank[hello["hello"]] = (conn, reader, hello["port"])
        self.conns = [by_rank[r][0] for r in range(self.world)]
        self.readers = [by_rank[r][1] for r in range(self.world)]
        peers = [[ep.ip, by_rank[r][2]] for r, ep in enumerate(self.endpoints)]
        self._broadcast({"peers": peers})
        for rank in range(self.world):
            self._expect(rank, "connected")

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.sendall(b'{"exit": true}\n')
            except OSError:
                pass
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.spawner.release(proc)
        for conn in self.conns:
            conn.close()
        self.conns, self.readers, self.procs = [], [], []
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None
        if self._tmp is not None:
            self._tmp.rmdir()
            self._tmp = None

    def __enter__(self) -> AllReduceJob:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- running -----------------------------------------------------------------------------
    def measure(self, size_bytes: int, algo: str = "ring", chunk_bytes: int = DEFAULT_CHUNK_BYTES, iters: int = 5,
                warmup: int = 1, progress: Callable[[str], None] | None = None) -> SizeResult:
        """Run `warmup` + `iters` all-reduces of `size_bytes` and return the timed ones."""
        if algo not in ALGORITHMS:
            raise JobError(f"algo: unknown algorithm {algo!r} (one of {', '.join(ALGORITHMS)})")
        if size_bytes < ITEMSIZE or size_bytes % ITEMSIZE:
            raise JobError(f"size: {size_bytes} B is not a positive multiple of {ITEMSIZE} (float32)")
        if chunk_bytes < ITEMSIZE:
            raise JobError(f"chunk: {chunk_bytes} B is smaller than one float32")
        if iters < 1 or warmup < 0:
            raise JobError(f"iters must be >= 1 and warmup >= 0, got {iters} and {warmup}")
        times: list[float] = []
        wrong = 0
        steps: list[list] = []
        for i in range(warmup + iters):
            elapsed, bad, steps = self._iterate(size_bytes // ITEMSIZE, algo, chunk_bytes // ITEMSIZE)
            wrong = max(wrong, bad)
            if i >= warmup:
                times.append(elapsed)
            if progress:
                kind = "warm-up" if i < warmup else f"iter {i - warmup + 1}/{iters}"
                progress(f"{self.name}: {format_size(size_bytes)} {algo} chunk {format_size(chunk_bytes)} {kind}: "
                         f"{elapsed:.3f} s{'' if not bad else f', {bad} WRONG'}")
        return SizeResult(size_bytes, algo, chunk_bytes, self.world, times, wrong, steps)

    def sweep(self, sizes_bytes: list[int], **kwargs: Any) -> list[SizeResult]:
        return [self.measure(size, **kwargs) for size in sizes_bytes]

    def _iterate(self, count: int, algo: str, chunk: int) -> tuple[float, int, list[list]]:
        self.iteration += 1
        it = self.iteration
        self._broadcast({"run": {"count": count, "algo": algo, "chunk": chunk, "iter": it}})
        for rank in range(self.world):
            self._expect(rank, "ready")
        self._broadcast({"go": it})
        done = [self._expect(rank, "done") for rank in range(self.world)]
        start = min(d["start"] for d in done)
        end = max(d["end"] for d in done)
        wrong = sum(d["wrong"] for d in done)
        steps = [[rank, *s] for rank, d in enumerate(done) for s in d["steps"]]
        return end - start, wrong, steps

    # ---- plumbing ----------------------------------------------------------------------------
    def _log(self, rank: int) -> Path:
        return self.workdir / f"rank{rank}-{self.endpoints[rank].name}.log"

    def _broadcast(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        for rank, conn in enumerate(self.conns):
            try:
                conn.sendall(data)
            except OSError as exc:
                raise JobError(f"job {self.name}: rank {rank} ({self.endpoints[rank].name}) is gone: {exc}"
                               f"{self._logs()}") from exc

    def _read(self, reader: TextIO, rank: int) -> dict:
        try:
            line = reader.readline()
        except TimeoutError:
            raise JobError(f"job {self.name}: rank {rank} ({self.endpoints[rank].name}) silent for "
                           f"{self.timeout_s:.0f} s{self._logs()}") from None
        if not line:
            raise JobError(f"job {self.name}: rank {rank} exited{self._logs()}")
        return json.loads(line)

    def _expect(self, rank: int, key: str) -> dict:
        message = self._read(self.readers[rank], rank)
        if "error" in message:
            raise JobError(f"job {self.name}: {message['error']}{self._logs()}")
        if key not in message:
            raise JobError(f"job {self.name}: rank {rank} sent {message!r}, expected {key!r}")
        return message

    def _check_alive(self, what: str) -> None:
        for rank, proc in enumerate(self.procs):
            if proc.poll() is not None:
                raise JobError(f"job {self.name}: rank {rank} ({self.endpoints[rank].name}) exited "
                               f"({proc.returncode}) while {what}{self._logs()}")

    def _logs(self) -> str:
        tails = []
        for rank in range(self.world):
            for path in (self._log(rank), self._log(rank).with_suffix(".out")):
                if path.exists() and path.stat().st_size:
                    lines = path.read_text(errors="replace").strip().splitlines()[-3:]
                    tails.append(f"  {path.name}: " + "\n    ".join(lines))
        return ("\n" + "\n".join(tails)) if tails else ""


def local_endpoints(world: int) -> list[Endpoint]:
    return [Endpoint(f"local{r}", "127.0.0.1") for r in range(world)]


def write_results(path: Path, results: list[SizeResult], meta: dict | None = None) -> None:
    path.write_text(json.dumps({**(meta or {}), "results": [r.to_dict() for r in results]}, indent=1))
