"""The run directory, a wire format: the name of every file of a run, given once, and one reader for
each CSV the lab reads from it (each file parsed in one place).

emulation/rundir.py makes a run directory (runs/<time>-<name>/, or under STARNET_RUNS); the
components write into it and the lab, the console and the tests read it:

    topology.yaml            the fabric (emulation writes; the controller, workloads, lab read)
    switches.json            each switch's P4Runtime address, device id and kind (emulation)
    switches/<sw>.log, switches/<sw>.stats.json, switches/<sw>.faults   one per switch process
    controller.addr          where the advice API listens (unix: controller.sock, or a short temp path)
    controller.ready, controller.log, controller.out, p4runtime-requests.log
    metrics.addr             where the controller's web front serves Prometheus /metrics (127.0.0.1:port)
    live.addr                where the controller's web front serves the live page (127.0.0.1:port)
    front.log                the web front's log (controller/front.py)
    faults.csv               every fault injected into the fabric, when and what (emulation/faults.py)
    telemetry.csv            per-port INT readings: time, switch, port, queue_pkts, hop_latency_us,
                             tx_rate_mbps, utilisation (the controller's collector)
    int-flows.csv            one row per INT-reported flow and its path (the collector)
    advice.csv               every advice decision (the advice loop)
    links.csv                the link timeline: failures, re-routes, recoveries (the controller)
    diagnosis.csv            the localiser's alerts (the controller)
    suspects.csv             the localiser's ranked suspects, each time the ranking changes (the controller)
    fidelity.csv, fidelity.txt, cpu.csv, rtwatch.log   timing fidelity and CPU per window
    host-rates.csv           each host's sending rate, sampled by a scenario run
    hostagents/<h>.csv|.log|.out   each host agent's applied pacing and its log
    hostagents/<h>.mode      the control mode the agent applied last (the testbed waits on it)
    jobs/<name>/             a workload's own files
    pids/, interfaces.txt, netns.txt   what `make clean` ends and deletes (emulation/rundir.py)
    stopped                  written when the testbed is down
"""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

TOPOLOGY = "topology.yaml"
SWITCHES = "switches.json"
SWITCH_DIR = "switches"
CONTROLLER_ADDR = "controller.addr"
CONTROLLER_SOCK = "controller.sock"
RUN_STARNET = Path("/run/starnet")  # each machine's own (a tmpfs): Unix sockets, ssh's control sockets


def cluster_sockets(run_dir: Path) -> Path:
    """Cluster mode: the directory of a run's Unix sockets at the same path on every server — the
    switches' P4Runtime on theirs, the controller's advice API here and forwarded to it on each other
    server, so one address (controller.addr) serves every machine."""
    return RUN_STARNET / f"cluster-{run_dir.name}"


UNIX_PATH_MAX = 107  # sun_path holds 108 bytes including the terminating NUL
CONTROLLER_READY = "controller.ready"
CONTROLLER_LOG = "controller.log"
CONTROLLER_OUT = "controller.out"
METRICS_ADDR = "metrics.addr"  # the controller's Prometheus /metrics, 127.0.0.1:PORT
LIVE_ADDR = "live.addr"  # the controller's live page, 127.0.0.1:PORT
FRONT_LOG = "front.log"  # the controller's web front (controller/front.py)
FAULTS = "faults.csv"
T = TypeVar("T")
FAULTS_FIELDS = ["began", "settled", "kind", "a", "b", "fault", "text"]
P4RUNTIME_LOG = "p4runtime-requests.log"
TELEMETRY = "telemetry.csv"
INT_FLOWS = "int-flows.csv"
ADVICE = "advice.csv"
PATHS = "paths.csv"
LINKS = "links.csv"
DIAGNOSIS = "diagnosis.csv"
SUSPECTS = "suspects.csv"
SUSPECTS_FIELDS = ["time", "rank", "target", "fault", "score", "alert", "evidence"]  # rank 0, empty target: none
FIDELITY = "fidelity.csv"
FIDELITY_TXT = "fidelity.txt"
CPU = "cpu.csv"
RTWATCH_LOG = "rtwatch.log"
HOST_RATES = "host-rates.csv"
HOSTAGENTS = "hostagents"
JOBS = "jobs"
PIDS = "pids"
INTERFACES = "interfaces.txt"
NETNS = "netns.txt"
STOPPED = "stopped"
CLUSTER_DIR = "cluster"  # cluster mode: the run's ssh key, known hosts and ssh_config; a namespace server's files
SSH_CONFIG = "cluster/ssh_config"
PLACEMENT = "cluster/placement.json"  # cluster mode: {node: its server} ("localhost": this machine)
REMOTE_PIDS = "remote-pids"  # remote-pids/<server>/<label>.pid: "pid start" of a process on that server

TELEMETRY_FIELDS = ["time", "switch", "port", "queue_pkts", "hop_latency_us", "tx_rate_mbps", "utilisation"]


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot, /proc/<pid>/stat), None when it is gone:
    with the PID, what tells a process from a later one that reused its number."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record_pid(run_dir: Path, label: str, pid: int) -> None:
    """pids/<label>.pid: "pid start", what `make clean` ends (emulation/rundir.py) and cpu.csv samples."""
    start = process_start_time(pid) or "?"
    (run_dir / PIDS / f"{label}.pid").write_text(f"{pid} {start}\n")


def forget_pid(run_dir: Path, label: str) -> None:
    (run_dir / PIDS / f"{label}.pid").unlink(missing_ok=True)


def agent_mode(host: str) -> str:
    """The mode the host's agent applied last (one word; written whole, by rename)."""
    return f"{HOSTAGENTS}/{host}.mode"


def write_agent_mode(run_dir: Path, host: str, mode: str) -> None:
    path = run_dir / agent_mode(host)
    partial = path.with_suffix(".mode.tmp")
    partial.write_text(mode + "\n")
    partial.replace(path)


def read_agent_mode(run_dir: Path, host: str) -> str | None:
    """The mode the host's agent says it applied last; None before it applied any."""
    try:
        return (run_dir / agent_mode(host)).read_text().strip() or None
    except FileNotFoundError:
        return None


def server_fidelity(server: str) -> str:
    """Where the processes on `server` append their fidelity records ("localhost": this machine's,
    fidelity.csv). A server of a cluster appends to a file of its own: appends of two machines to one
    file on a shared run directory cut into each other's lines (O_APPEND is atomic within one
    kernel, not across NFS or FUSE clients). Readers take fidelity.csv and these beside it
    (wire/fidelity.fidelity_files)."""
    return FIDELITY if server == "localhost" else f"fidelity-{server}.csv"


def server_cpu(server: str) -> str:
    """Cluster mode: the CPU a server's processes used, per window (emulation/cpuuse.py, sampled there)."""
    return f"cpu-{server}.csv"


def switch_log(name: str) -> str:
    return f"{SWITCH_DIR}/{name}.log"


def switch_stats(name: str) -> str:
    return f"{SWITCH_DIR}/{name}.stats.json"


def int_clock_epochs(run_dir: Path, switches: list[str]) -> dict[str, float]:
    """Per soft switch, the wall time its INT clock counts from (its stats file's
    int_clock_epoch_wall): a hop's egress µs + this = when the frame left, on the wall clock."""
    epochs = {}
    for name in switches:
        path = run_dir / switch_stats(name)
        value = json.loads(path.read_text()).get("int_clock_epoch_wall") if path.exists() else None
        if value is not None:
            epochs[name] = float(value)
    return epochs


@dataclass(frozen=True, slots=True)
class QueueReading:
    """One row of telemetry.csv: a port's state as an INT report carried it."""

    time: float
    switch: str
    port: int
    queue_pkts: int
    utilisation: float | None  # None until the port's rate is known
    hop_latency_us: int = 0


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a run's CSV file (header first) as dicts; none when the file is not there (yet).
    Whole rows only: the files are read while their writers append to them, so a line not yet ended
    by its newline is left for the next read, and a row with fewer fields than the header is dropped
    (a noisy gate's test_failover once read a links.csv row without its `link`)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    text = text[:text.rfind("\n") + 1]
    return [row for row in csv.DictReader(io.StringIO(text, newline=""))
            if None not in row.values() and None not in row]


def read_telemetry(path: Path, t0: float = -math.inf, t1: float = math.inf) -> list[QueueReading]:
    """telemetry.csv's readings taken in [t0, t1), in file (time) order."""
    out = []
    for row in read_rows(path):
        t = float(row["time"])
        if t0 <= t < t1:
            out.append(QueueReading(t, row["switch"], int(row["port"]), int(row["queue_pkts"]),
                                    float(row["utilisation"]) if row["utilisation"] else None,
                                    int(row["hop_latency_us"] or 0)))
    return out


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault of faults.csv: when it began and settled (wall s), its kind, the link or
    node (a, b), its figures as emulation.faults.Fault.record() gives them, and a sentence."""

    began: float
    settled: float
    kind: str
    a: str
    b: str
    fault: dict
    text: str


def append_fault(run_dir: Path, record: FaultRecord) -> None:
    """Add a fault to the run's faults.csv (its header first when the file is new)."""
    path = Path(run_dir) / FAULTS
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(FAULTS_FIELDS)
        writer.writerow([f"{record.began:.6f}", f"{record.settled:.6f}", record.kind, record.a, record.b,
                         json.dumps(record.fault, sort_keys=True), record.text])


def parse_fault(values: list[str]) -> FaultRecord | None:
    """A fault from the fields of one faults.csv line; None for the header or a malformed line."""
    row = dict(zip(FAULTS_FIELDS, values, strict=False))
    try:
        fault = json.loads(row["fault"])
        return FaultRecord(float(row["began"]), float(row["settled"]), row["kind"], row["a"], row["b"],
                           fault if isinstance(fault, dict) else {}, row["text"])
    except (KeyError, ValueError):
        return None


def read_faults(run_dir: Path) -> list[FaultRecord]:
    """Every fault injected in a run, in order."""
    return LineTail(Path(run_dir) / FAULTS).poll(parse_fault)


class LineTail:
    """Follows a CSV file while processes append to it: each `poll` parses the complete lines written
    since the last one, once each (a line still being written waits for the next poll)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.lock = threading.Lock()

    def poll(self, parse: Callable[[list[str]], T | None]) -> list[T]:
        """[parse(fields) for each new line, where it is not None] (thread-safe)."""
        with self.lock:
            try:
                with self.path.open("rb") as f:
                    f.seek(self.offset)
                    data = f.read()
            except FileNotFoundError:
                return []
            complete = data[:data.rfind(b"\n") + 1]
            self.offset += len(complete)
            parsed = (parse(values) for values in csv.reader(io.StringIO(complete.decode(errors="replace"))))
            return [item for item in parsed if item is not None]


def suspects_rows(t: float, ranked: list[tuple[str, str, float, bool, str]]) -> list[list[str]]:
    """suspects.csv's rows for one ranking (target, fault, score, alert, evidence), strongest first; a
    ranking with no suspect is one row of rank 0, so that a reader sees the suspects go."""
    if not ranked:
        return [[f"{t:.3f}", "0", "", "", "", "", ""]]
    return [[f"{t:.3f}", str(i), target, fault, f"{score:.3f}", "1" if alert else "0", evidence]
            for i, (target, fault, score, alert, evidence) in enumerate(ranked, 1)]


def read_suspects(run_dir: Path) -> list[tuple[float, list[tuple[str, str, float, bool, str]]]]:
    """suspects.csv as (time, ranking) in order: each ranking (target, fault, score, alert, evidence)."""
    out: list[tuple[float, list[tuple[str, str, float, bool, str]]]] = []
    for row in read_rows(Path(run_dir) / SUSPECTS):
        try:
            t = float(row["time"])
            entry = (row["target"], row["fault"], float(row["score"]), row["alert"] == "1", row["evidence"]) \
                if row["target"] else None
        except (KeyError, ValueError):
            continue
        if not out or out[-1][0] != t:
            out.append((t, []))
        if entry is not None:
            out[-1][1].append(entry)
    return out


def unix_socket_path(path: Path) -> tuple[Path, Path | None]:
    """Where to bind a Unix socket meant to be at `path`: there, or, when the path is too long for one
    (a deep STARNET_RUNS), a socket of the same name in a short temporary directory, returned second for
    the owner to remove. Never 127.0.0.1 instead: host namespaces share the filesystem, not the loopback."""
    if len(str(path)) <= UNIX_PATH_MAX:
        return path, None
    short = Path(tempfile.mkdtemp(prefix="starnet-"))
    return short / path.name, short
