"""Start the ranks of a collective job (all-reduce, all-gather, reduce-scatter, all-to-all), drive its
iterations and collect nccl-tests-style results.

    job = AllReduceJob(endpoints, LocalSpawner(), workdir, name="j1")
    with job:
        results = job.sweep(sizes_bytes=[1 << 20, 8 << 20], algo="ring", chunk_bytes=1 << 20, iters=5)
    print(format_table(results))

The ranks connect once (a full TCP mesh) and then run any number of (size, algorithm, chunk)
configurations — the sweep and the auto-tuner reuse one job. An iteration's time runs from the
earliest rank's start to the latest rank's end (CLOCK_MONOTONIC is shared by all namespaces).
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads.allreduce.executor import DEFAULT_CHUNK_BYTES
from workloads.allreduce.schedule import BUS_FACTOR, SERVER_AWARE, algorithms
from workloads.hosts import Endpoint, JobError, ProcessGroup, Spawner, format_size

ITEMSIZE = 4  # float32


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


@dataclass
class SizeResult:
    """One (size, algorithm, chunk) measurement over `iters` timed iterations."""

    size_bytes: int
    algo: str
    chunk_bytes: int
    world: int
    times_s: list[float]
    wrong: int
    steps: list[list] = field(default_factory=list)  # last iteration: [rank, step, send, peer, bytes, start, end,
    #                                                    compute]
    collective: str = "allreduce"
    split: float = 0.0  # of what a server's GPUs exchange, the share sent through their NICs
    rails: list[float] | None = None  # hier: the rails' rates its shares were sized by (None: equal)

    @property
    def label(self) -> str:
        """The algorithm, the NVLink+NET split where there is one and whether the shares were sized
        by rail: 'hier+25%net', 'hier/rails'."""
        return self.algo + (f"+{self.split:.0%}net" if self.split else "") + ("/rails" if self.rails else "")

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
        """algbw · 2(n-1)/n for all-reduce, (n-1)/n for the others: what each rank's link carries,
        comparable across world sizes (nccl-tests)."""
        return self.algbw_gbs * BUS_FACTOR[self.collective](self.world)

    @property
    def redop(self) -> str:
        return "sum" if self.collective in ("allreduce", "reducescatter") else "none"

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(count=self.count, type="float", redop=self.redop, label=self.label, time_us=self.time_s * 1e6,
                   algbw_gbs=self.algbw_gbs, busbw_gbs=self.busbw_gbs, busbw_mbps=self.busbw_gbs * 8e3)
        return out


def format_table(results: list[SizeResult], link_mbps: float | None = None) -> str:
    """The nccl-tests table (in-place columns), plus busbw in Mbit/s and as a share of the link rate."""
    head = (f"{'#':>1} {'size':>10} {'count':>10} {'type':>6} {'redop':>6} {'algo':>5} {'chunk':>6} "
            f"{'time':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7} {'busbw':>8}" + ("  of link" if link_mbps else ""))
    units = (f"{'#':>1} {'(B)':>10} {'(elements)':>10} {'':>6} {'':>6} {'':>5} {'(B)':>6} "
             f"{'(us)':>11} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7} {'(Mb/s)':>8}")
    lines = [head, units]
    kinds = sorted({r.collective for r in results})
    if kinds != ["allreduce"]:
        lines.insert(0, f"# collective: {', '.join(kinds)}")
    for r in results:
        line = (f"  {r.size_bytes:>10} {r.count:>10} {'float':>6} {r.redop:>6} {r.label:>5} "
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


def gpus_per_server(endpoints: list[Endpoint]) -> int | None:
    """G when the ranks are the same number of GPUs of each server, server by server (1: no rank is
    in a server); None for any other layout (the server-aware algorithms cannot run on it)."""
    if all(e.server is None for e in endpoints):
        return 1
    runs = [(server, len(list(group))) for server, group in itertools.groupby(e.server for e in endpoints)]
    servers = [server for server, _ in runs]
    if None in servers or len(set(servers)) != len(servers) or len({size for _, size in runs}) != 1:
        return None
    return runs[0][1]


class AllReduceJob:
    """endpoints: the ranks' hosts in rank order; spawner: starts a rank process on its host;
    workdir: rank logs and the control socket; controller: gRPC address the ranks report their
    step timings to (None: no controller); declare: the ranks also declare their demands there;
    faults_file: a host's faults file, which its ranks follow (None: none followed);
    cc: TCP congestion control; seed: of the input data."""

    def __init__(self, endpoints: list[Endpoint], spawner: Spawner, workdir: Path, name: str = "allreduce",
                 controller: str | None = None, cc: str | None = None, seed: int = 0,
                 timeout_s: float = 120.0, port_base: int = 0, declare: bool = True,
                 faults_file: Callable[[str], Path] | None = None) -> None:
        if len(endpoints) < 2:
            raise JobError(f"job {name}: an all-reduce needs at least 2 ranks, got {len(endpoints)}")
        if len({e.name for e in endpoints}) != len(endpoints) and len({e.ip for e in endpoints}) > 1:
            raise JobError(f"job {name}: a host appears twice in {[e.name for e in endpoints]}")
        self.endpoints = endpoints
        self.name = name
        self.controller = controller
        self.declare = declare
        self.faults_file = faults_file
        self.cc = cc
        self.seed = seed
        self.port_base = port_base
        self.group = ProcessGroup(endpoints, spawner, workdir, name, kind="rank", timeout_s=timeout_s)
        self.iteration = 0
        self.local = gpus_per_server(endpoints)  # GPUs per server in rank order (None: uneven)

    @property
    def world(self) -> int:
        return len(self.endpoints)

    # ---- life cycle --------------------------------------------------------------------------
    def start(self) -> AllReduceJob:
        hellos = self.group.start(self._argv)
        try:
            peers = [[ep.ip, hello["port"], ep.server, ep.nvlink, hello.get("nvport")]
                     for ep, hello in zip(self.endpoints, hellos, strict=True)]
            self.group.broadcast({"peers": peers})
            for rank in range(self.world):
                self.group.expect(rank, "connected")
        except BaseException:
            self.close()
            raise
        return self

    def _argv(self, rank: int, ep: Endpoint, control: Path) -> list[str]:
        argv = [sys.executable, "-m", "workloads.allreduce.rank", "--control", str(control), "--rank", str(rank),
                "--world", str(self.world), "--ip", ep.ip, "--seed", str(self.seed),
                "--timeout-s", str(self.group.timeout_s), "--log-file", str(self.group.log_path(rank))]
        if self.cc:
            argv += ["--cc", self.cc]
        argv += ["--job", self.name]
        if self.controller:
            argv += ["--controller", self.controller] + (["--declare"] if self.declare else [])
        if self.faults_file:
            argv += ["--faults-file", str(self.faults_file(ep.name))]
        if self.port_base:
            argv += ["--port-base", str(self.port_base)]
        if ep.nvlink:
            argv += ["--nvlink-ip", ep.nvlink]
        if self.local and self.local > 1:
            argv += ["--local", str(self.local)]
        return argv

    def close(self) -> None:
        self.group.close()

    def __enter__(self) -> AllReduceJob:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- running -----------------------------------------------------------------------------
    def measure(self, size_bytes: int, algo: str = "ring", chunk_bytes: int = DEFAULT_CHUNK_BYTES, iters: int = 5,
                warmup: int = 1, progress: Callable[[str], None] | None = None,
                collective: str = "allreduce", split: float = 0.0,
                rails: Sequence[float] | None = None) -> SizeResult:
        """Run `warmup` + `iters` collectives of `size_bytes` and return the timed ones (split: of
        what GPUs of one server exchange, the share sent through their NICs)."""
        if not 0 <= split <= 1:
            raise JobError(f"split: must be within 0..1 (a share of the NVLink traffic), got {split:g}")
        try:
            known = algorithms(collective)
        except ValueError as exc:
            raise JobError(str(exc)) from exc
        if algo not in known:
            raise JobError(f"algo: unknown {collective} algorithm {algo!r} (one of {', '.join(known)})")
        if algo in SERVER_AWARE and self.local is None:
            raise JobError(f"algo {algo}: the ranks are not the same number of GPUs of each server, server by "
                           f"server ({', '.join(f'{e.name}@{e.server}' for e in self.endpoints)})")
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
            elapsed, bad, steps = self._iterate(size_bytes // ITEMSIZE, algo, chunk_bytes // ITEMSIZE, collective,
                                                split, rails)
            wrong = max(wrong, bad)
            if i >= warmup:
                times.append(elapsed)
            if progress:
                kind = "warm-up" if i < warmup else f"iter {i - warmup + 1}/{iters}"
                what = (algo if collective == "allreduce" else f"{collective} {algo}") + (
                    f" split {split:.0%}" if split else "")
                progress(f"{self.name}: {format_size(size_bytes)} {what} chunk {format_size(chunk_bytes)} {kind}: "
                         f"{elapsed:.3f} s{'' if not bad else f', {bad} WRONG'}")
        return SizeResult(size_bytes, algo, chunk_bytes, self.world, times, wrong, steps, collective, split,
                          list(rails) if rails else None)

    def sweep(self, sizes_bytes: list[int], **kwargs: Any) -> list[SizeResult]:
        return [self.measure(size, **kwargs) for size in sizes_bytes]

    def _iterate(self, count: int, algo: str, chunk: int, collective: str, split: float,
                 rails: Sequence[float] | None) -> tuple[float, int, list[list]]:
        self.iteration += 1
        it = self.iteration
        self.group.broadcast({"run": {"count": count, "algo": algo, "chunk": chunk, "iter": it,
                                      "collective": collective, "split": split,
                                      **({"rails": list(rails)} if rails else {})}})
        for rank in range(self.world):
            self.group.expect(rank, "ready")
        self.group.broadcast({"go": it})
        done = [self.group.expect(rank, "done") for rank in range(self.world)]
        start = min(d["start"] for d in done)
        end = max(d["end"] for d in done)
        wrong = sum(d["wrong"] for d in done)
        steps = [[rank, *s] for rank, d in enumerate(done) for s in d["steps"]]
        return end - start, wrong, steps

def rail_rates(result: SizeResult, local: int) -> list[float]:
    """Each rail's rate in an iteration (bytes/s), from its step timings: per GPU, what it sent to
    GPUs of other servers over the time it spent sending it; a rail runs at its slowest GPU's."""
    sent: dict[int, list[float]] = {}
    for rank, _step, send, peer, nbytes, start, end, _work in result.steps:
        if send and peer // local != rank // local:
            entry = sent.setdefault(rank, [0.0, start, end])
            entry[0] += nbytes
            entry[1], entry[2] = min(entry[1], start), max(entry[2], end)
    if {rank % local for rank in sent} != set(range(local)):
        raise JobError("rails: the iteration's steps do not show every rail sending to another server")
    rates: dict[int, float] = {}
    for rank, (nbytes, start, end) in sent.items():
        rate = nbytes / max(end - start, 1e-6)
        rates[rank % local] = min(rates.get(rank % local, rate), rate)
    return [rates[g] for g in range(local)]


def write_results(path: Path, results: list[SizeResult], meta: dict | None = None) -> None:
    path.write_text(json.dumps({**(meta or {}), "results": [r.to_dict() for r in results]}, indent=1))
