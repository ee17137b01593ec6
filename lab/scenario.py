"""Scenario files: one experiment — fabric, control modes to compare, jobs and faults — in YAML.

    name: demo
    seed: 1
    dataplane: soft                # soft | bmv2 | auto
    modes: [none, ecn, advice]     # each runs the same schedule on a fresh testbed
    duration_s: 60                 # per mode: jobs still running then are reported unfinished
    topology:
      name: leafspine              # a generator (leafspine, fattree, dumbbell) or file: path.yaml
      args: {spines: 2, leaves: 2, hosts_per_leaf: 4}
      capacity_mbps: 20            # every link, unless the lines below say otherwise
      spine_capacity_mbps: 10      # switch-to-switch links only (an oversubscribed spine layer)
      queue_pkts: 64
    jobs:
      - {name: ar-a, kind: allreduce, hosts: [h1, h2, h5, h6], size: 2M, iters: 3, algo: ring, start_s: 0}
        # ports: ephemeral (default: the ranks' TCP ports are the kernel's, as Gloo's, MPI's and
        # NCCL's are) | fixed (a range per job, so every mode hashes the same flows onto the same
        # ECMP paths; port_base: N picks the range)
      - {name: burst, kind: incast, receiver: h5, senders: [h3, h4, h7], size: 1M, start_s: 2}
      - {name: bg, kind: background, hosts: all, load: 0.1, seconds: 10, start_s: 0}
      - {name: perm, kind: pattern, pattern: random, size: 20M, start_s: 0}
        # Hedera's patterns (NSDI'10), one long TCP flow per host: random (a permutation),
        # stride (stride: i), staggered (p_edge: 0.5, p_pod: 0.3); hosts: all unless listed
      - {name: train, kind: command, hosts: [h1, h2, h5, h6], command: "{python} examples/ddp_train.py --steps 50",
         timeout_s: 120, env: {GLOO_ALGO: ring}, master_port: 29500}
        # your program, one rank per host (workloads/command): RANK, WORLD_SIZE, MASTER_ADDR, … set;
        # command: a string (split as a shell would) or a list; {python} is the testbed's interpreter;
        # numbers a rank writes as JSON lines to $STARNET_METRICS become the job's figures (p50, p99);
        # launcher: mpi runs one mpirun (Open MPI) in the first host, mpi_args its own options
    faults:
      - {at_s: 5, kind: link_down, link: [s3, s1]}        # both ends, a cut cable
      - {at_s: 9, kind: link_up, link: [s3, s1]}
      - {at_s: 12, kind: loss, link: [s1, s4], percent: 100}  # frames from s1 to s4 only; 0 clears
      - {at_s: 15, kind: flap, link: [s4, s2], count: 10, period_s: 0.5}  # down and up, 10 times
      - {at_s: 20, kind: rate, link: [s3, s1], mbps: 10}   # s3's port to s1 drains at 10 Mbit/s; 0 restores
      - {at_s: 25, kind: delay, switch: s2, delay_ms: 5}  # s2 holds every frame 5 ms; 0 clears
      - {at_s: 28, kind: delay, host: h3, delay_ms: 20}   # h3's ranks take 20 ms longer per piece

`load_scenario` checks everything against the topology before anything starts and names the
field of the first problem (``jobs[1].hosts: no host 'h99' in leafspine-2x2x4``).
"""

from __future__ import annotations

import dataclasses
import inspect
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.advice import MODES
from emulation.faults import FAULT_KINDS, Fault
from topologies import TopologyError, load_topology
from topologies.generators import GENERATORS
from topologies.spec import Topology
from wire.yamlfile import Fields, parse_yaml, read_file
from workloads.allreduce.schedule import ALGORITHMS
from workloads.command.job import DEFAULT_MASTER_PORT, LAUNCHERS
from workloads.flows.schedule import PATTERNS
from workloads.hosts import parse_size

JOB_KINDS = ("allreduce", "incast", "background", "pattern", "command")
DATAPLANES = ("soft", "bmv2", "auto")
ROOT = Path(__file__).resolve().parent.parent


class ScenarioError(ValueError):
    """A scenario file that cannot run; the message names the file and the field."""


@dataclass
class JobSpecification:
    name: str
    kind: str
    start_s: float = 0.0
    hosts: list[str] = field(default_factory=list)  # allreduce ranks, background hosts
    size_bytes: int = 0  # allreduce message, incast bytes per sender
    iters: int = 3
    algo: str = "ring"
    port_base: int = 0  # the ranks' first TCP port with ports fixed (0: the runner gives each job its own range)
    ports: str = "ephemeral"  # ephemeral | fixed
    pattern: str = ""  # kind pattern: stride | staggered | random
    stride: int = 1
    p_edge: float = 0.5
    p_pod: float = 0.3
    receiver: str = ""
    senders: list[str] = field(default_factory=list)
    load: float = 0.0
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)  # kind command: the program and its arguments
    timeout_s: float = 0.0  # kind command: 0 = until the scenario's duration_s
    env: dict[str, str] = field(default_factory=dict)
    master_port: int = DEFAULT_MASTER_PORT
    launcher: str = "direct"  # kind command: direct (a process per host) | mpi (one mpirun)
    mpi_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TimedFault:
    at_s: float  # into the mode's run
    fault: Fault


@dataclass
class Scenario:
    name: str
    source: str
    topology: Topology
    modes: list[str]
    dataplane: str
    duration_s: float
    seed: int
    jobs: list[JobSpecification]
    faults: list[TimedFault]

    def shortened(self, factor: float) -> Scenario:
        """The same schedule with sizes, durations and times scaled by `factor` (tests, quick looks)."""
        jobs = [dataclasses.replace(j, start_s=j.start_s * factor, seconds=j.seconds * factor,
                                    size_bytes=max(4, int(j.size_bytes * factor) // 4 * 4) if j.size_bytes else 0)
                for j in self.jobs]
        faults = [TimedFault(f.at_s * factor, dataclasses.replace(f.fault, period_s=f.fault.period_s * factor))
                  for f in self.faults]
        return dataclasses.replace(self, jobs=jobs, faults=faults, duration_s=self.duration_s * factor)


def load_scenario(path: Path | str) -> Scenario:
    return parse_scenario(read_file(path, ScenarioError), str(path), base=Path(path).parent)


def parse_scenario(text: str, source: str = "scenario", base: Path = ROOT) -> Scenario:
    return _Reader(source, base).scenario(parse_yaml(text, source, ScenarioError))


class _Reader(Fields):
    def __init__(self, source: str, base: Path) -> None:
        super().__init__(source, ScenarioError)
        self.base = base

    def size(self, value: Any, where: str) -> int:
        try:
            size = parse_size(value) if isinstance(value, str | int) and not isinstance(value, bool) else -1
        except ValueError:
            raise self.fail(where, f"cannot read size {value!r} (e.g. 64K, 2M)") from None
        if size < 4:
            raise self.fail(where, f"must be at least 4 bytes, got {value!r}")
        return size

    def hosts(self, value: Any, where: str, topo: Topology, allow_all: bool = False) -> list[str]:
        if allow_all and value == "all":
            return [h.name for h in topo.hosts]
        if not isinstance(value, list) or not value:
            raise self.fail(where, f"must be a non-empty list of host names{' or all' if allow_all else ''}")
        for i, host in enumerate(value):
            if not isinstance(host, str) or not topo.is_host(host):
                raise self.fail(f"{where}[{i}]", f"no host {host!r} in {topo.name}")
        if len(set(value)) != len(value):
            raise self.fail(where, f"lists a host twice: {value}")
        return list(value)

    def command(self, value: Any, where: str) -> list[str]:
        """A program and its arguments: a list of strings, or one string split as a shell would."""
        if isinstance(value, str):
            try:
                argv = shlex.split(value)
            except ValueError as exc:
                raise self.fail(where, f"cannot split {value!r}: {exc}") from None
        elif isinstance(value, list) and all(isinstance(v, str | int | float) and not isinstance(v, bool)
                                             for v in value):
            argv = [str(v) for v in value]
        else:
            raise self.fail(where, f"must be a string or a list of strings, got {value!r}")
        if not argv:
            raise self.fail(where, "is empty: give the program to run")
        return argv

    def scenario(self, data: Any) -> Scenario:
        d = self.mapping(data, "", {"name", "seed", "dataplane", "modes", "duration_s", "topology", "jobs", "faults"})
        name = self.text(d.get("name"), "name")
        topo = self.topology(d.get("topology"))
        modes = d.get("modes", ["none", "advice"])
        if isinstance(modes, str):
            modes = [modes]
        if not isinstance(modes, list) or not modes:
            raise self.fail("modes", f"must be a list of modes ({', '.join(MODES)})")
        for i, mode in enumerate(modes):
            if mode not in MODES:
                raise self.fail(f"modes[{i}]", f"{mode!r} is not one of {', '.join(MODES)}")
        dataplane = d.get("dataplane", "soft")
        if dataplane not in DATAPLANES:
            raise self.fail("dataplane", f"{dataplane!r} is not one of {', '.join(DATAPLANES)}")
        duration = self.number(d.get("duration_s", 120), "duration_s", 1, 3600)
        seed = int(self.number(d.get("seed", 1), "seed", 0, 2**32 - 1, integer=True))
        jobs_data = d.get("jobs")
        if not isinstance(jobs_data, list) or not jobs_data:
            raise self.fail("jobs", "must be a non-empty list of jobs")
        jobs = [self.job(j, f"jobs[{i}]", topo, duration) for i, j in enumerate(jobs_data)]
        names = [j.name for j in jobs]
        for i, n in enumerate(names):
            if names.index(n) != i:
                raise self.fail(f"jobs[{i}].name", f"{n!r} is used by jobs[{names.index(n)}] too")
        faults_data = d.get("faults") or []
        if not isinstance(faults_data, list):
            raise self.fail("faults", "must be a list")
        faults = [self.fault(f, f"faults[{i}]", topo, duration) for i, f in enumerate(faults_data)]
        return Scenario(name, self.source, topo, list(modes), dataplane, float(duration), seed, jobs, faults)

    def topology(self, value: Any) -> Topology:
        d = self.mapping(value, "topology", {"name", "file", "args", "capacity_mbps", "spine_capacity_mbps",
                                             "queue_pkts"})
        if ("name" in d) == ("file" in d):
            raise self.fail("topology", "give one of name (a generator) or file (a topology YAML)")
        if "file" in d:
            path = Path(self.text(d["file"], "topology.file"))
            path = path if path.is_absolute() else (self.base / path if (self.base / path).exists() else ROOT / path)
            try:
                topo = load_topology(path)
            except (TopologyError, OSError) as exc:
                raise self.fail("topology.file", str(exc)) from None
            if "args" in d:
                raise self.fail("topology.args", "only for a generator (name)")
        else:
            name = d["name"]
            if name not in GENERATORS:
                raise self.fail("topology.name", f"{name!r} is not one of {', '.join(GENERATORS)}")
            shape = set(inspect.signature(GENERATORS[name]).parameters) - {"capacity_mbps", "queue_pkts"}
            args = self.mapping(d.get("args", {}), "topology.args", shape)
            kwargs: dict[str, float] = {k: int(self.number(v, f"topology.args.{k}", 1, 64, integer=True))
                                        for k, v in args.items()}
            if "capacity_mbps" in d:
                kwargs["capacity_mbps"] = self.number(d["capacity_mbps"], "topology.capacity_mbps", 0.1, 100_000)
            if "queue_pkts" in d:
                kwargs["queue_pkts"] = int(self.number(d["queue_pkts"], "topology.queue_pkts", 2, 2**19 - 1,
                                                       integer=True))
            try:
                topo = GENERATORS[name](**kwargs)
            except TopologyError as exc:
                raise self.fail("topology", str(exc)) from None
        if "spine_capacity_mbps" in d:
            spine = self.number(d["spine_capacity_mbps"], "topology.spine_capacity_mbps", 0.1, 100_000)
            links = [dataclasses.replace(link, capacity_mbps=float(spine))
                     if topo.is_switch(link.a) and topo.is_switch(link.b) else link for link in topo.links]
            topo = Topology(f"{topo.name}-spine{spine:g}mbps", list(topo.switches), list(topo.hosts), links,
                            dict(topo.defaults), list(topo.servers))
        return topo

    def job(self, value: Any, where: str, topo: Topology, duration: float) -> JobSpecification:
        kinds = {"allreduce": {"hosts", "size", "iters", "algo", "port_base", "ports"},
                 "incast": {"receiver", "senders", "size"}, "background": {"hosts", "load", "seconds"},
                 "pattern": {"hosts", "pattern", "size", "stride", "p_edge", "p_pod"},
                 "command": {"hosts", "command", "timeout_s", "env", "master_port", "launcher", "mpi_args"}}
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a mapping, got {type(value).__name__}")
        kind = value.get("kind")
        if kind not in JOB_KINDS:
            raise self.fail(f"{where}.kind", f"{kind!r} is not one of {', '.join(JOB_KINDS)}")
        d = self.mapping(value, where, {"name", "kind", "start_s"} | kinds[kind])
        job = JobSpecification(name=self.text(d.get("name"), f"{where}.name"), kind=kind,
                               start_s=float(self.number(d.get("start_s", 0), f"{where}.start_s", 0, duration)))
        if kind == "allreduce":
            job.hosts = self.hosts(d.get("hosts"), f"{where}.hosts", topo)
            if len(job.hosts) < 2:
                raise self.fail(f"{where}.hosts", "an all-reduce needs at least 2 hosts")
            job.size_bytes = self.size(d.get("size", "1M"), f"{where}.size")
            if job.size_bytes % 4:
                raise self.fail(f"{where}.size", f"must be a multiple of 4 bytes (float32), got {job.size_bytes}")
            job.iters = int(self.number(d.get("iters", 3), f"{where}.iters", 1, 1000, integer=True))
            job.port_base = int(self.number(d.get("port_base", 0), f"{where}.port_base", 0, 65435, integer=True))
            if 0 < job.port_base < 1024:
                raise self.fail(f"{where}.port_base", f"must be 0 or in 1024..65435, got {job.port_base}")
            job.ports = d.get("ports", "fixed" if job.port_base else "ephemeral")
            if job.ports not in ("ephemeral", "fixed"):
                raise self.fail(f"{where}.ports", f"{job.ports!r} is not one of ephemeral, fixed")
            if job.port_base and job.ports != "fixed":
                raise self.fail(f"{where}.ports", "port_base gives fixed ports: ports must be fixed with it")
            job.algo = d.get("algo", "ring")
            if job.algo not in (*ALGORITHMS, "auto"):
                raise self.fail(f"{where}.algo", f"{job.algo!r} is not one of {', '.join((*ALGORITHMS, 'auto'))}")
        elif kind == "incast":
            receiver = d.get("receiver")
            if not isinstance(receiver, str) or not topo.is_host(receiver):
                raise self.fail(f"{where}.receiver", f"no host {receiver!r} in {topo.name}")
            job.receiver = receiver
            job.senders = self.hosts(d.get("senders"), f"{where}.senders", topo)
            if receiver in job.senders:
                raise self.fail(f"{where}.senders", f"the receiver {receiver} cannot also send")
            job.size_bytes = self.size(d.get("size", "1M"), f"{where}.size")
        elif kind == "pattern":
            job.hosts = self.hosts(d.get("hosts", "all"), f"{where}.hosts", topo, allow_all=True)
            if len(job.hosts) < 2:
                raise self.fail(f"{where}.hosts", "a pattern needs at least 2 hosts")
            pattern = d.get("pattern")
            if pattern not in PATTERNS:
                raise self.fail(f"{where}.pattern", f"{pattern!r} is not one of {', '.join(PATTERNS)}")
            job.pattern = pattern
            job.size_bytes = self.size(d.get("size", "20M"), f"{where}.size")
            job.stride = int(self.number(d.get("stride", 1), f"{where}.stride", 1, len(job.hosts) - 1, integer=True))
            job.p_edge = float(self.number(d.get("p_edge", 0.5), f"{where}.p_edge", 0, 1))
            job.p_pod = float(self.number(d.get("p_pod", 0.3), f"{where}.p_pod", 0, 1 - job.p_edge))
        elif kind == "command":
            job.hosts = self.hosts(d.get("hosts", "all"), f"{where}.hosts", topo, allow_all=True)
            job.command = self.command(d.get("command"), f"{where}.command")
            job.timeout_s = float(self.number(d.get("timeout_s", duration), f"{where}.timeout_s", 0.1, duration))
            env = d.get("env", {})
            if not isinstance(env, dict):
                raise self.fail(f"{where}.env", f"must be a mapping of NAME: value, got {env!r}")
            for key, val in env.items():
                if not isinstance(key, str) or not key or "=" in key or isinstance(val, dict | list):
                    raise self.fail(f"{where}.env.{key}", f"must be NAME: value, got {key!r}: {val!r}")
            job.env = {k: str(v) for k, v in env.items()}
            job.master_port = int(self.number(d.get("master_port", DEFAULT_MASTER_PORT), f"{where}.master_port",
                                              1024, 65535, integer=True))
            job.launcher = self.one_of(d.get("launcher", "direct"), f"{where}.launcher", LAUNCHERS)
            job.mpi_args = self.command(d["mpi_args"], f"{where}.mpi_args") if "mpi_args" in d else []
            if job.mpi_args and job.launcher != "mpi":
                raise self.fail(f"{where}.mpi_args", "only with launcher: mpi")
        else:
            job.hosts = self.hosts(d.get("hosts", "all"), f"{where}.hosts", topo, allow_all=True)
            if len(job.hosts) < 2:
                raise self.fail(f"{where}.hosts", "background flows need at least 2 hosts")
            job.load = float(self.number(d.get("load"), f"{where}.load", 0.001, 1))
            job.seconds = float(self.number(d.get("seconds"), f"{where}.seconds", 0.1, duration))
        return job

    def fault(self, value: Any, where: str, topo: Topology, duration: float) -> TimedFault:
        kind = value.get("kind") if isinstance(value, dict) else None
        fields = {"loss": {"percent"}, "flap": {"count", "period_s"}, "rate": {"mbps"}}
        extra = fields.get(kind, set()) if isinstance(kind, str) else set()
        if kind == "delay":
            d = self.mapping(value, where, {"at_s", "kind", "switch", "host", "delay_ms"})
            at = float(self.number(d.get("at_s"), f"{where}.at_s", 0, duration))
            if ("switch" in d) == ("host" in d):
                raise self.fail(f"{where}", "a delay names one switch (switch: s2) or one host (host: h3)")
            role = "switch" if "switch" in d else "host"
            node = d[role]
            if not isinstance(node, str) or not (topo.is_switch(node) if role == "switch" else topo.is_host(node)):
                raise self.fail(f"{where}.{role}", f"no {role} {node!r} in {topo.name}")
            return TimedFault(at, Fault(kind, (node, node),
                                        delay_ms=float(self.number(d.get("delay_ms"), f"{where}.delay_ms", 0, 1000))))
        d = self.mapping(value, where, {"at_s", "kind", "link"} | extra)
        if kind not in FAULT_KINDS:
            raise self.fail(f"{where}.kind", f"{kind!r} is not one of {', '.join(FAULT_KINDS)}")
        at = float(self.number(d.get("at_s"), f"{where}.at_s", 0, duration))
        link = d.get("link")
        if not (isinstance(link, list) and len(link) == 2 and all(isinstance(n, str) for n in link)):
            raise self.fail(f"{where}.link", f"must be the two ends of a link, e.g. [s3, s1], got {link!r}")
        try:
            if not topo.is_nvlink(link[0], link[1]):  # a GPU's NVLink port: [h3, srv1]
                topo.find_link(link[0], link[1])
        except TopologyError:
            raise self.fail(f"{where}.link", f"no link between {link[0]} and {link[1]} in {topo.name}") from None
        figures: dict[str, float] = {}
        if kind == "loss":
            if not topo.is_switch(link[1]):
                raise self.fail(f"{where}.link", f"frames are lost on their way into a switch: {link[1]} is not one")
            figures["percent"] = float(self.number(d.get("percent"), f"{where}.percent", 0, 100))
        elif kind == "rate":
            if not (topo.is_switch(link[0]) or topo.is_nvlink(link[0], link[1])):
                raise self.fail(f"{where}.link", f"a rate is a switch port's or a GPU's NVLink's ([h3, srv1]): "
                                                 f"{link[0]} is not a switch")
            figures["mbps"] = float(self.number(d.get("mbps"), f"{where}.mbps", 0, 100_000))
        elif kind == "flap":
            count = int(self.number(d.get("count"), f"{where}.count", 1, 1000, integer=True))
            period = float(self.number(d.get("period_s"), f"{where}.period_s", 0.02, duration))
            if at + count * period > duration:
                raise self.fail(f"{where}", f"{count} flaps of {period:g} s from {at:g} s end after "
                                            f"duration_s ({duration:g})")
            figures = {"count": count, "period_s": period}
        return TimedFault(at, Fault(kind, (link[0], link[1]), **figures))  # type: ignore[arg-type]
