"""Workloads on a testbed's hosts: rank order, addresses, job directories and spawning in host namespaces.

Works from inside the testbed's process (`Testbed`) and from any other process through the run
directory of a running testbed (its topology.yaml, host PIDs and controller address), so
`python -m workloads.allreduce --hosts h1,h2,h3,h4` and `python -m workloads.flows` run against the
`make run` testbed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from emulation.nodes import intf_name
from emulation.rundir import RUNS
from emulation.spawn import LocalSpawner, SpawnError
from emulation.spawn import Spawner as EmulationSpawner
from topologies.addressing import AddressPlan
from topologies.spec import Topology, load_topology
from wire import faultsfile, runfiles
from workloads.hosts import Endpoint, JobError

if TYPE_CHECKING:
    from emulation.net import Testbed


def topology_order(topo: Topology, hosts: list[str]) -> list[str]:
    """Hosts grouped by the switch they hang off (in topology order), so that ring neighbours share
    a leaf and only one ring edge per leaf boundary crosses the spines; GPUs in servers grouped by
    server, in their server's GPU order (ring neighbours share NVLink; the server-aware algorithms
    take GPU i of each server as its rail)."""
    if topo.servers and all(topo.server_of(h) is not None for h in hosts):
        server_index = {s.name: i for i, s in enumerate(topo.servers)}

        def by_server(h: str) -> tuple[int, int]:
            server = topo.server_of(h)
            assert server is not None
            return server_index[server.name], server.gpus.index(h)

        return sorted(hosts, key=by_server)
    switch_index = {s.name: i for i, s in enumerate(topo.switches)}
    host_index = {h.name: i for i, h in enumerate(topo.hosts)}
    return sorted(hosts, key=lambda h: (switch_index[topo.host_link(h).other(h)], host_index[h]))


class NamespaceSpawner:
    """Starts rank processes inside Mininet hosts' namespaces through the testbed's spawner
    (emulation/spawn.py), recorded in the run directory so `make clean` can end what a crashed job leaves.
    new_session: each process leads a session and process group of its own (mnexec -d)."""

    def __init__(self, host_pids: dict[str, int], run_dir: Path, job: str, new_session: bool = False,
                 spawner: EmulationSpawner | None = None) -> None:
        if shutil.which("mnexec") is None:
            raise JobError("mnexec (Mininet) not found on PATH")
        self.spawner: EmulationSpawner = spawner or LocalSpawner(run_dir, host_pids)
        self.run_dir = run_dir
        self.job = job
        self.new_session = new_session
        self.labels: dict[int, str] = {}

    def __call__(self, endpoint: Endpoint, argv: list[str], log_path: Path) -> subprocess.Popen:
        label = f"rank-{self.job}-{endpoint.name}"
        try:
            proc = self.spawner.start(label, argv, log_path, host=endpoint.name, new_session=self.new_session)
        except SpawnError as exc:
            raise JobError(str(exc)) from None
        self.labels[proc.pid] = label
        return proc

    def release(self, proc: subprocess.Popen) -> None:
        self.end(proc)  # it has ended: its records go (on a server too)

    def end(self, proc: subprocess.Popen) -> None:
        label = self.labels.pop(proc.pid, None)
        if label:  # on its server, by its PID there (its ssh session here ends with it)
            self.spawner.stop(label, proc)

    @property
    def socket_dir(self) -> Path | None:
        return self.spawner.socket_dir

    def share(self, label: str, path: Path) -> Callable[[], None]:
        return self.spawner.share(label, path)


class FabricView:
    """What a job needs to know about a running testbed: topology, addresses, host PIDs, controller."""

    def __init__(self, run_dir: Path, topo: Topology, host_pids: dict[str, int],
                 spawner: EmulationSpawner | None = None) -> None:
        self.run_dir = run_dir
        self.topo = topo
        self.plan = AddressPlan(topo)
        self.host_pids = host_pids
        self.processes = spawner  # the testbed's (cluster mode: starts a host's processes on its server)

    @classmethod
    def of_testbed(cls, tb: Testbed) -> FabricView:
        assert tb.net is not None, "the testbed is up"
        return cls(tb.run_dir, tb.topo, {h.name: h.pid for h in tb.net.hosts}, tb.spawner)

    @classmethod
    def of_run_dir(cls, run_dir: Path | None = None) -> FabricView:
        """The given run directory, or the newest testbed under runs/ that is still running."""
        if run_dir is None:
            running = [d for d in sorted(RUNS.glob("*"), reverse=True)
                       if (d / runfiles.CONTROLLER_ADDR).exists() and not (d / runfiles.STOPPED).exists()]
            if not running:
                raise JobError("no running testbed under runs/ (start one with `make run`, or use --local N)")
            run_dir = running[0]
        pids = {}
        for path in (run_dir / runfiles.PIDS).glob("host-*.pid"):
            pids[path.stem.removeprefix("host-")] = int(path.read_text().split()[0])
        return cls(run_dir, load_topology(run_dir / runfiles.TOPOLOGY), pids)

    def host_faults(self, host: str) -> Path:
        """The host's faults file (written by emulation/faults.py), which its ranks follow."""
        return faultsfile.path_of(self.run_dir, host, "hosts")

    def controller_address(self) -> str | None:
        path = self.run_dir / runfiles.CONTROLLER_ADDR
        return path.read_text().strip() if path.exists() else None

    def link_mbps(self, hosts: list[str]) -> float:
        """The slowest host link among `hosts` (what busbw is compared with)."""
        return min(self.topo.host_link(h).capacity_mbps for h in hosts)

    def endpoints(self, hosts: list[str], order: str = "topology") -> list[Endpoint]:
        """order: topology (grouped by leaf) or given (as listed)."""
        if len(set(hosts)) != len(hosts):
            raise JobError(f"hosts: {' '.join(hosts)} lists a host twice")
        known = [h.name for h in self.topo.hosts]
        unknown = [h for h in hosts if h not in known]
        if unknown:
            raise JobError(f"hosts: {', '.join(unknown)} not in topology {self.topo.name} ({', '.join(known)})")
        if order == "topology":
            hosts = topology_order(self.topo, hosts)
        elif order != "given":
            raise JobError(f"order: {order!r} is neither topology nor given")
        missing = [h for h in hosts if h not in self.host_pids]
        placement = self.run_dir / runfiles.PLACEMENT
        elsewhere = json.loads(placement.read_text()) if missing and placement.exists() else {}
        remote = [f"{h} on {elsewhere[h]}" for h in missing if elsewhere.get(h, "localhost") != "localhost"]
        if remote:
            raise JobError(f"hosts: {', '.join(remote)} (cluster mode): a job over hosts of other servers starts "
                           "from the testbed's own CLI (`allreduce`, `job`), which reaches them there")
        if missing:
            raise JobError(f"hosts: {', '.join(missing)} not running in {self.run_dir.name}")
        return [Endpoint(h, self.plan.hosts[h].ip, server.name if (server := self.topo.server_of(h)) else None,
                         self.plan.nvlink.get(h)) for h in hosts]

    def spawner(self, job: str, new_session: bool = False) -> NamespaceSpawner:
        return NamespaceSpawner(self.host_pids, self.run_dir, job, new_session, self.processes)

    def interface(self, host: str) -> str:
        """The host's fabric interface (h1-eth0), what GLOO_SOCKET_IFNAME and btl_tcp_if_include name."""
        return intf_name(self.topo, host, self.topo.host_link(host).port_of(host))

    def job_dir(self, name: str) -> Path:
        """A new directory runs/<run>/jobs/<name>[-N]/ for one job's logs and results."""
        base = self.run_dir / runfiles.JOBS
        base.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            path = base / (name if n == 1 else f"{name}-{n}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                n += 1
