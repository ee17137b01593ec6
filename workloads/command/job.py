"""Run a user's program on the testbed's hosts, one rank per host, as torchrun or mpirun would.

    spec = CommandSpec(hosts=["h1", "h2", "h3", "h4"], argv=["python3", "train.py"], timeout_s=300)
    outcome = run_command(spec, FabricView.of_testbed(tb))
    print(outcome.table)          # rank, host, exit code, seconds, last line of output

Each rank starts in its host's namespaces with the environment programs expect (`rank_env`):
torch.distributed's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(a static rendezvous on rank 0's address: torchrun's c10d store would pick its host by
gethostname(), which every namespace shares, pytorch#73656), GLOO_SOCKET_IFNAME (without it Gloo
advertises 127.0.0.1), and STARNET_* (host, address, interface, job directory, the controller's
advice address) for programs that want them. OMP_NUM_THREADS is 1 unless given, as torchrun sets
it. `{python}` in the command is the testbed's own interpreter (its venv has torch when `make deps`
installed it). Every rank leads a process group of its own; its output goes to rank<N>-<host>.log in
the job's directory.

Figures: a rank may append JSON objects to the file $STARNET_METRICS names (one per line, e.g.
{"step": 3, "step_s": 0.41}); every numeric field but step and rank is summarised over all ranks'
lines as <field>_p50, <field>_p99 and <field>_n (`summarise_metrics`).

With launcher "mpi" the job is one `mpirun` (Open MPI from Debian's openmpi-bin), started in rank
0's host, one slot per host in rank order: it starts its daemons on the other hosts through
workloads/command/mpiagent.py (each in its host's namespaces, `plm_rsh_agent`), its ranks talk
over TCP only on the fabric's addresses (`btl tcp,self`, `btl_tcp_if_include` and
`oob_tcp_if_include` by the hosts' CIDR), per-rank output lands in mpi-output/, and `mpi_args` go
to mpirun as given (e.g. Open MPI 4.1's `--mca coll_tuned_use_dynamic_rules 1 --mca
coll_tuned_allreduce_algorithm 3`). The ranks read OMPI_COMM_WORLD_RANK and _SIZE.

The job ends like torchrun's: when every rank has exited 0 it succeeded; when one fails, the others
are ended at once (SIGTERM to their groups, SIGKILL after `grace_s`); when `timeout_s` passes, all
are. The outcome names each rank's exit code and the tail of its output, and results.json holds it.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from emulation.rundir import new_run_dir
from wire.stats import percentile
from workloads.fabric import FabricView
from workloads.hosts import BackgroundJob, Endpoint, JobError, LocalSpawner, Spawner, local_endpoints

DEFAULT_MASTER_PORT = 29500  # torch.distributed's
POLL_S = 0.1
KILLED_S = 2.0  # a group sent SIGKILL is waited for this long to be gone
PROGRESS_S = 5.0
TAIL_LINES = 5
OK, FAILED, ENDED, TIMEOUT = "ok", "failed", "ended", "timeout"
PYTHON = "{python}"
LAUNCHERS = ("direct", "mpi")


@dataclass
class CommandSpec:
    """hosts: Mininet hosts, one rank each (or local=N ranks on loopback); argv: the program and its
    arguments; order: given (rank i on hosts[i]) or topology (grouped by leaf); timeout_s: the whole
    job's limit; grace_s: between SIGTERM and SIGKILL when ranks are ended; master_port: rank 0's
    rendezvous port; env: more variables for every rank (they win over the defaults); launcher:
    direct (a process per host, torchrun's way) or mpi (one mpirun); mpi_args: mpirun's own options."""

    argv: list[str]
    hosts: list[str] = field(default_factory=list)
    local: int = 0
    name: str = "job"
    order: str = "given"
    timeout_s: float = 600.0
    grace_s: float = 5.0
    master_port: int = DEFAULT_MASTER_PORT
    env: dict[str, str] = field(default_factory=dict)
    launcher: str = "direct"
    mpi_args: list[str] = field(default_factory=list)

    def check(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise JobError(f"launcher: {self.launcher!r} is not one of {', '.join(LAUNCHERS)}")
        if self.mpi_args and self.launcher != "mpi":
            raise JobError("mpi_args: only with launcher mpi")
        if not self.argv:
            raise JobError("command: give the program to run (… -- python3 train.py)")
        if not self.hosts and self.local < 1:
            raise JobError("hosts: give at least one host (or local >= 1 ranks on loopback)")
        if self.hosts and self.local:
            raise JobError("hosts and local: give one of them")
        if self.timeout_s <= 0 or self.grace_s < 0:
            raise JobError(f"timeout_s must be > 0 and grace_s >= 0, got {self.timeout_s} and {self.grace_s}")
        if not 1024 <= self.master_port <= 65535:
            raise JobError(f"master_port: must be in 1024..65535, got {self.master_port}")
        bad = [k for k in self.env if not k or "=" in k]
        if bad:
            raise JobError(f"env: {bad[0]!r} is not a variable name")


def hosts_cidr(ips: list[str]) -> str:
    """The smallest network holding every address: what Open MPI's *_if_include take."""
    net = ipaddress.ip_network(f"{ips[0]}/32")
    while not all(ipaddress.ip_address(ip) in net for ip in ips):
        net = net.supernet()
    return str(net)


def mpirun_argv(spec: CommandSpec, endpoints: list[Endpoint], agent: Path | None, workdir: Path,
                env: dict[str, str]) -> list[str]:
    """mpirun for the job: one slot per endpoint in rank order; agent: the launch agent script (None:
    every rank on this host, loopback)."""
    n = len(endpoints)
    argv = ["mpirun", "--allow-run-as-root", "-np", str(n), "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--output-filename", str(workdir / "mpi-output")]
    if agent is None:
        argv += ["--oversubscribe", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    else:
        cidr = hosts_cidr([e.ip for e in endpoints])
        argv += ["--host", ",".join(f"{e.ip}:1" for e in endpoints), "--mca", "plm_rsh_agent", str(agent),
                 "--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "btl_tcp_if_include", cidr,
                 "--mca", "oob_tcp_if_include", cidr]
    for key, value in env.items():
        argv += ["-x", f"{key}={value}"]
    return [*argv, *spec.mpi_args]


def rank_env(rank: int, world: int, endpoint: Endpoint, master: Endpoint, master_port: int, ifname: str,
             job_dir: Path, job: str, controller: str | None) -> dict[str, str]:
    """The variables one rank starts with (besides the caller's environment)."""
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "GROUP_RANK": str(rank), "MASTER_ADDR": master.ip, "MASTER_PORT": str(master_port),
           "GLOO_SOCKET_IFNAME": ifname, "TP_SOCKET_IFNAME": ifname,
           "STARNET_JOB": job, "STARNET_JOB_DIR": str(job_dir), "STARNET_HOST": endpoint.name,
           "STARNET_IP": endpoint.ip, "STARNET_IFNAME": ifname, "PYTHONUNBUFFERED": "1",
           "STARNET_METRICS": str(job_dir / f"rank{rank}-metrics.jsonl")}
    if controller:
        env["STARNET_CONTROLLER"] = controller
    return env


@dataclass
class RankResult:
    rank: int
    host: str
    ip: str
    status: str = "running"  # ok | failed (exited non-zero by itself) | ended (by the job) | timeout
    exit_code: int | None = None
    elapsed_s: float = 0.0
    log: str = ""
    tail: list[str] = field(default_factory=list)


@dataclass
class CommandOutcome:
    spec: CommandSpec
    workdir: Path
    ranks: list[RankResult]
    status: str  # ok | failed | timeout
    reason: str
    elapsed_s: float
    metrics: dict[str, float] = field(default_factory=dict)  # summarise_metrics of the ranks' lines

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def table(self) -> str:
        lines = [f"{'rank':>4}  {'host':<8} {'exit':>5}  {'status':<8} {'seconds':>8}  last output"]
        for r in self.ranks:
            code = "-" if r.exit_code is None else str(r.exit_code)
            lines.append(f"{r.rank:>4}  {r.host:<8} {code:>5}  {r.status:<8} {r.elapsed_s:>8.1f}  "
                         f"{(r.tail[-1] if r.tail else '')[:70]}")
        for key in self.metrics:
            if key.endswith("_p50"):
                base = key.removesuffix("_p50")
                lines.append(f"# {base}: p50 {self.metrics[key]:.4g}, p99 {self.metrics[base + '_p99']:.4g} "
                             f"over {self.metrics[base + '_n']:.0f} values")
        lines.append(f"# {self.spec.name}: {self.status}: {self.reason} "
                     f"({self.elapsed_s:.1f} s; logs in {self.workdir})")
        return "\n".join(lines)

    def failure_tails(self) -> str:
        """The output tails of the ranks that did not succeed (what a user needs to see first)."""
        out = []
        for r in self.ranks:
            if r.status != OK and r.tail:
                out.append(f"  rank {r.rank} ({r.host}, {r.log}):\n    " + "\n    ".join(r.tail))
        return "\n".join(out)


def summarise_metrics(paths: list[Path]) -> dict[str, float]:
    """<field>_p50, <field>_p99 and <field>_n of every numeric field (but step, rank) in the JSON
    lines of `paths`; a line that is not a JSON object is skipped (a program's half-written last line)."""
    values: dict[str, list[float]] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict):
                continue
            for key, value in record.items():
                if key in ("step", "rank") or isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                if math.isfinite(value):
                    values.setdefault(str(key), []).append(float(value))
    out: dict[str, float] = {}
    for key, vals in sorted(values.items()):
        out.update({f"{key}_p50": percentile(vals, 50), f"{key}_p99": percentile(vals, 99), f"{key}_n": len(vals)})
    return out


def _tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    return [line.rstrip() for line in text.strip().splitlines()[-lines:]]


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a rank's process group; False when nothing of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def end_groups(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every rank's process group, SIGKILL what is left after grace_s, reap the leaders.
    A group outlives its leader while a child of it runs; the group's ID is not reused meanwhile."""
    alive = [p.pid for p in procs if _signal_group(p.pid, signal.SIGTERM)]
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        for p in procs:
            p.poll()
        alive = [pgid for pgid in alive if _signal_group(pgid, 0)]
        if alive:
            time.sleep(POLL_S)
    for pgid in alive:
        _signal_group(pgid, signal.SIGKILL)
    for p in procs:
        p.wait()
    deadline = time.monotonic() + KILLED_S  # what SIGKILL hit: gone before the job says it ended
    while alive and time.monotonic() < deadline:
        alive = [pgid for pgid in alive if _signal_group(pgid, 0)]
        if alive:
            time.sleep(POLL_S)


class CommandJob:
    """The ranks of one run of the program. endpoints: rank order; spawner: starts a process on its
    host in a session of its own; ifname: a host's fabric interface; host_pids: the PIDs holding
    the hosts' namespaces (launcher mpi's agent enters them)."""

    def __init__(self, spec: CommandSpec, endpoints: list[Endpoint], spawner: Spawner, workdir: Path,
                 ifname: Callable[[str], str], controller: str | None = None,
                 host_pids: dict[str, int] | None = None) -> None:
        self.spec = spec
        self.host_pids = host_pids
        self.endpoints = endpoints
        self.spawner = spawner
        self.workdir = workdir
        self.ifname = ifname
        self.controller = controller

    def log_path(self, rank: int) -> Path:
        return self.workdir / f"rank{rank}-{self.endpoints[rank].name}.log"

    def _launches(self) -> list[tuple[RankResult, Endpoint, list[str], Path]]:
        """What to start: a process per host (direct), or one mpirun in rank 0's host (mpi)."""
        spec, world = self.spec, len(self.endpoints)
        program = [sys.executable if word == PYTHON else word for word in spec.argv]
        if spec.launcher == "mpi":
            first = self.endpoints[0]
            env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "STARNET_JOB": spec.name,
                   "STARNET_JOB_DIR": str(self.workdir), "STARNET_METRICS": str(self.workdir / "rank0-metrics.jsonl"),
                   **({"STARNET_CONTROLLER": self.controller} if self.controller else {}), **spec.env}
            agent = None if first.ip.startswith("127.") else self._mpi_agent()
            log = self.workdir / f"mpirun-{first.name}.log"
            return [(RankResult(0, first.name, first.ip, log=log.name), first,
                     [*mpirun_argv(spec, self.endpoints, agent, self.workdir, env), *program], log)]
        out = []
        for i, ep in enumerate(self.endpoints):
            env = rank_env(i, world, ep, self.endpoints[0], spec.master_port, self.ifname(ep.name), self.workdir,
                           spec.name, self.controller)
            env.setdefault("OMP_NUM_THREADS", "1")
            env.update(spec.env)
            out.append((RankResult(i, ep.name, ep.ip, log=self.log_path(i).name), ep,
                        ["env", *(f"{k}={v}" for k, v in env.items()), *program], self.log_path(i)))
        return out

    def _mpi_agent(self) -> Path:
        """The launch agent script mpirun calls instead of ssh, and the hosts it may enter."""
        if self.host_pids is None:
            raise JobError("launcher mpi: the hosts' PIDs are unknown (no testbed)")
        hosts = self.workdir / "mpi-hosts.json"
        hosts.write_text(json.dumps({ep.ip: {"name": ep.name, "pid": self.host_pids[ep.name]}
                                     for ep in self.endpoints}, indent=1))
        agent = self.workdir / "mpi-agent"
        agent.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m workloads.command.mpiagent "
                         f"{shlex.quote(str(hosts))} \"$@\"\n")
        agent.chmod(0o755)
        return agent

    def run(self, progress: Callable[[str], None] | None = None) -> CommandOutcome:
        spec = self.spec
        self.workdir.mkdir(parents=True, exist_ok=True)
        launches = self._launches()
        ranks = [launch[0] for launch in launches]
        procs: list[subprocess.Popen] = []
        started = time.monotonic()
        status, reason = FAILED, "not started"
        try:
            for _, ep, argv, log in launches:
                procs.append(self.spawner(ep, argv, log))
            status, reason = self._wait(procs, ranks, started, progress)
        finally:
            for r in ranks:
                if r.status == "running":  # still running when the job ended: ended by it
                    r.status, r.elapsed_s = ENDED, time.monotonic() - started
            end_groups(procs, spec.grace_s)  # the ranks' leftover children too
            for p in procs:
                self.spawner.release(p)
        for r, p in zip(ranks, procs, strict=False):
            r.exit_code = p.returncode
            r.tail = _tail(self.workdir / r.log)
            if r.status == ENDED and p.returncode == 0:  # it finished by itself as the job was ending
                r.status = OK
        metrics = summarise_metrics([self.workdir / f"rank{i}-metrics.jsonl" for i in range(len(self.endpoints))])
        outcome = CommandOutcome(spec, self.workdir, ranks, status, reason, time.monotonic() - started, metrics)
        (self.workdir / "results.json").write_text(json.dumps(
            {"job": spec.name, "kind": "command", "status": outcome.status, "reason": outcome.reason,
             "elapsed_s": outcome.elapsed_s, "metrics": metrics, "spec": asdict(spec),
             "ranks": [asdict(r) for r in ranks]}, indent=1))
        (self.workdir / "results.txt").write_text(outcome.table + "\n")
        return outcome

    def _wait(self, procs: list[subprocess.Popen], ranks: list[RankResult], started: float,
              progress: Callable[[str], None] | None) -> tuple[str, str]:
        spec = self.spec
        deadline = started + spec.timeout_s
        next_note = started + PROGRESS_S
        if progress:
            progress(f"{spec.name}: {len(procs)} ranks started ({' '.join(r.host for r in ranks)}): "
                     f"{' '.join(spec.argv)}")
        while True:
            now = time.monotonic()
            failed = None
            for r, p in zip(ranks, procs, strict=True):  # every exit of this look is taken, then judged
                if r.status == "running" and p.poll() is not None:
                    r.exit_code, r.elapsed_s = p.returncode, now - started
                    r.status = OK if p.returncode == 0 else FAILED
                    if progress:
                        progress(f"{spec.name}: rank {r.rank} ({r.host}) exited {p.returncode} after "
                                 f"{r.elapsed_s:.1f} s")
                    failed = failed or (r if r.status == FAILED else None)
            if failed is not None:
                who = f"mpirun ({failed.host})" if spec.launcher == "mpi" else f"rank {failed.rank} ({failed.host})"
                return FAILED, f"{who} exited {failed.exit_code}; the other ranks were ended"
            running = [r for r in ranks if r.status == "running"]
            if not running:
                return OK, f"all {len(ranks)} ranks exited 0"
            if now >= deadline:
                for r in running:
                    r.status, r.elapsed_s = TIMEOUT, now - started
                return TIMEOUT, (f"{len(running)} of {len(ranks)} ranks still running after the timeout of "
                                 f"{spec.timeout_s:g} s; ended")
            if progress and now >= next_note:
                next_note = now + PROGRESS_S
                progress(f"{spec.name}: {len(running)} of {len(ranks)} ranks running, {now - started:.0f} s "
                         f"(timeout {spec.timeout_s:g} s)")
            time.sleep(POLL_S)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_command(spec: CommandSpec, view: FabricView | None = None,
                progress: Callable[[str], None] | None = _stderr, workdir: Path | None = None) -> CommandOutcome:
    """Run `spec` on the testbed behind `view` (the newest running one when None), or on loopback
    when spec.local, and write results.json / results.txt to its directory."""
    spec.check()
    if spec.local:
        endpoints = local_endpoints(spec.local)
        workdir = workdir or new_run_dir(f"job-{spec.name}")
        spawner: Spawner = LocalSpawner(new_session=True)
        controller: str | None = None
        host_pids: dict[str, int] | None = None

        def ifname(host: str) -> str:
            return "lo"
    else:
        if view is None:
            view = FabricView.of_run_dir()
        endpoints = view.endpoints(spec.hosts, spec.order)
        workdir = workdir or view.job_dir(spec.name)
        spawner = view.spawner(workdir.name, new_session=True)
        controller = view.controller_address()
        ifname = view.interface
        host_pids = view.host_pids
    return CommandJob(spec, endpoints, spawner, workdir, ifname, controller, host_pids).run(progress)


def background(spec: CommandSpec, view: FabricView) -> BackgroundJob:
    """The job as the CLI runs it (foreground or background), described by `jobs`."""
    return BackgroundJob(spec.name, lambda progress: run_command(spec, view, progress=progress), describe)


def describe(outcome: object, full: bool = False) -> str:
    assert isinstance(outcome, CommandOutcome)
    if full:
        tails = outcome.failure_tails()
        return outcome.table + (("\n" + tails) if tails else "")
    return f"{outcome.spec.name}: {outcome.status}: {outcome.reason} ({outcome.workdir})"
