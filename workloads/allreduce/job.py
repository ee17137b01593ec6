"""One collective job end to end: spec → ranks on hosts → results table and JSON in the run directory.

Used by `python -m workloads.allreduce`, the testbed CLI's `allreduce` and the tests:

    spec = JobSpec(hosts=["h1", "h2", "h3", "h4"], sizes=[8 << 20], algo="ring", iters=5)
    outcome = run_job(spec, FabricView.of_testbed(tb))
    print(outcome.table)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from emulation.rundir import new_run_dir
from workloads.allreduce.executor import DEFAULT_CHUNK_BYTES
from workloads.allreduce.launcher import AllReduceJob, SizeResult, format_table, rail_rates, write_results
from workloads.allreduce.schedule import COLLECTIVES, algorithms
from workloads.allreduce.tuner import DEFAULT_CACHE, TunerCache, fingerprint, pick
from workloads.fabric import FabricView
from workloads.hosts import BackgroundJob, JobError, LocalSpawner, Spawner, local_endpoints

CONGESTION_CONTROL = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


@dataclass
class JobSpec:
    """hosts: Mininet host names (or local=N ranks on loopback); sizes: message sizes in bytes;
    collective: allreduce | allgather | reducescatter | alltoall; algo: one of the collective's
    (allreduce: ring | tree | hd | rings | hier (servers)) or auto (the tuner's pick of algorithm,
    chunk and split); chunk_bytes: pipelining unit;
    order: topology | given; split: of what a server's GPUs exchange, the share sent through their
    NICs (TCCL's NVLink+NET parallel path; 0: all over NVLink); declare: declare demands to the
    controller (None: whenever the testbed has one; its ranks report their step timings there
    whatever this says); port_base: fixed TCP ports for the ranks (0: ephemeral), so repeated runs
    take the same ECMP paths; adapt_rails (hier): one probe iteration measures each rail's rate, and
    the timed ones size the shares the rails carry by it (a degraded rail carries less)."""

    hosts: list[str] = field(default_factory=list)
    local: int = 0
    sizes: list[int] = field(default_factory=lambda: [8 << 20])
    algo: str = "ring"
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    iters: int = 5
    warmup: int = 1
    cc: str | None = None
    seed: int = 0
    order: str = "topology"
    declare: bool | None = None
    name: str = "allreduce"
    tuner_cache: Path = DEFAULT_CACHE
    tuner_iters: int = 2
    port_base: int = 0
    collective: str = "allreduce"
    split: float = 0.0
    adapt_rails: bool = False

    def check(self) -> None:
        if self.collective not in COLLECTIVES:
            raise JobError(f"collective: {self.collective!r} is not one of {', '.join(COLLECTIVES)}")
        known = (*algorithms(self.collective), "auto")
        if self.algo not in known:
            raise JobError(f"algo: {self.algo!r} is not a {self.collective} algorithm ({', '.join(known)})")
        if not self.hosts and self.local < 2:
            raise JobError("hosts: give at least 2 hosts (or local >= 2 ranks on loopback)")
        if self.hosts and self.local:
            raise JobError("hosts and local: give one of them")
        if not self.sizes or any(s < 4 or s % 4 for s in self.sizes):
            raise JobError(f"size: every size must be a positive multiple of 4 bytes, got {self.sizes}")
        if not 0 <= self.split <= 1:
            raise JobError(f"split: must be within 0..1 (a share of the NVLink traffic), got {self.split:g}")
        if self.chunk_bytes < 4:
            raise JobError(f"chunk: must be >= 4 bytes, got {self.chunk_bytes}")
        if self.port_base and not 1024 <= self.port_base <= 65535 - 100:
            raise JobError(f"port_base: must be 0 or in 1024..65435, got {self.port_base}")
        if self.port_base and self.local:
            raise JobError("port_base: loopback ranks share one address; use ephemeral ports (0)")
        if self.iters < 1 or self.warmup < 0:
            raise JobError(f"iters: must be >= 1 (and warmup >= 0), got {self.iters}")
        if self.cc:
            available = CONGESTION_CONTROL.read_text().split()
            if self.cc not in available:
                raise JobError(f"cc: {self.cc!r} is not offered by this kernel (available: {' '.join(available)}; "
                               f"`modprobe tcp_{self.cc}` may add it)")


@dataclass
class JobOutcome:
    spec: JobSpec
    hosts: list[str]  # in rank order
    workdir: Path
    results: list[SizeResult]
    link_mbps: float | None
    picks: dict[int, dict] = field(default_factory=dict)  # size → the tuner's pick (algo auto)

    @property
    def table(self) -> str:
        return format_table(self.results, self.link_mbps)

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.results)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_job(spec: JobSpec, view: FabricView | None = None, progress: Callable[[str], None] | None = _stderr,
            workdir: Path | None = None) -> JobOutcome:
    """Run `spec` on the testbed behind `view` (or on loopback when spec.local) and write
    results.json and results.txt to its directory (runs/<run>/jobs/<name>/)."""
    spec.check()
    if spec.local:
        endpoints = local_endpoints(spec.local)
        workdir = workdir or new_run_dir(f"allreduce-{spec.name}")
        spawner: Spawner = LocalSpawner()
        controller, link_mbps, topo_text, faults_file = None, None, f"loopback:{spec.local}", None
    else:
        if view is None:
            view = FabricView.of_run_dir()
        endpoints = view.endpoints(spec.hosts, spec.order)
        workdir = workdir or view.job_dir(spec.name)
        spawner = view.spawner(workdir.name)
        controller = view.controller_address()
        faults_file = view.host_faults
        link_mbps = view.link_mbps(spec.hosts)
        topo_text = view.topo.to_yaml()
    hosts = [e.name for e in endpoints]
    job = AllReduceJob(endpoints, spawner, workdir, name=spec.name, controller=controller, cc=spec.cc, seed=spec.seed,
                       port_base=spec.port_base, declare=spec.declare is not False, faults_file=faults_file)
    results, picks = [], {}
    started = time.time()
    if progress:
        progress(f"{spec.name}: {len(hosts)} ranks ({' '.join(hosts)}), {spec.collective} {spec.algo}, "
                 f"sizes {len(spec.sizes)}, {spec.iters} iterations each")
    with job:
        for size in spec.sizes:
            algo, chunk, split = spec.algo, spec.chunk_bytes, spec.split
            if algo == "auto":
                key = fingerprint(topo_text, hosts) + ("" if spec.collective == "allreduce" else f":{spec.collective}")
                chosen = pick(job, size, key, TunerCache(spec.tuner_cache), workdir, progress=progress,
                              iters=spec.tuner_iters, collective=spec.collective)
                algo, chunk, split = chosen.algo, chosen.chunk_bytes, chosen.split
                picks[size] = {"algo": algo, "chunk_bytes": chunk, "split": split, "cached": chosen.cached,
                               "tuned_time_s": chosen.time_s}
                if progress:
                    progress(f"{spec.name}: auto → {algo} chunk {chunk} B" + (f" split {split:.0%}" if split else "")
                             + f" ({'cached' if chosen.cached else 'tuned now'})")
            rails = None
            if spec.adapt_rails:
                if algo not in ("hier", "hier-serial") or not job.local or job.local < 2:
                    raise JobError(f"adapt_rails: for hier on GPUs of multi-GPU servers, not {algo} on "
                                   f"{job.local} GPU(s) per server")
                probe = job.measure(size, algo=algo, chunk_bytes=chunk, iters=1, warmup=0,
                                    collective=spec.collective, split=split)
                rails = rail_rates(probe, job.local)
                if progress:
                    progress(f"{spec.name}: rails at " + ", ".join(f"{r * 8e-6:.1f}" for r in rails)
                             + " Mbit/s: shares sized in proportion")
            results.append(job.measure(size, algo=algo, chunk_bytes=chunk, iters=spec.iters, warmup=spec.warmup,
                                       progress=progress, collective=spec.collective, split=split, rails=rails))
    outcome = JobOutcome(spec, hosts, workdir, results, link_mbps, picks)
    meta = {"job": spec.name, "hosts": hosts, "spec": {k: str(v) if isinstance(v, Path) else v
                                                       for k, v in asdict(spec).items()},
            "link_mbps": link_mbps, "picks": {str(k): v for k, v in picks.items()},
            "started": started, "elapsed_s": time.time() - started}
    write_results(workdir / "results.json", results, meta)
    (workdir / "results.txt").write_text(outcome.table + "\n")
    return outcome


def background(spec: JobSpec, view: FabricView) -> BackgroundJob:
    """The job as the CLI runs it (foreground or background), described by `jobs`."""
    return BackgroundJob(spec.name, lambda progress: run_job(spec, view, progress=progress), describe)


def describe(outcome: object, full: bool = False) -> str:
    assert isinstance(outcome, JobOutcome)
    summary = (f"{outcome.spec.name}: done, {' '.join(outcome.hosts)}; "
               + "; ".join(f"{'' if r.collective == 'allreduce' else r.collective + ' '}{r.algo} {r.size_bytes} B "
                           f"busbw {r.busbw_gbs * 8e3:.2f} Mbit/s, {r.wrong} wrong"
                           for r in outcome.results) + f" ({outcome.workdir})")
    return (outcome.table + "\n" + summary) if full else summary
