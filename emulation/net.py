"""Bring a testbed up and down: Mininet hosts and links, P4 switches, the controller.

    with Testbed(topology_by_name("leafspine"), dataplane="soft") as tb:
        tb.net.pingAll()

Everything started is recorded in the run directory so `make clean` can end it if a run dies.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mininet.log import info
from mininet.net import Mininet
from pyroute2 import IPRoute

from emulation import cpuuse
from emulation import fidelity as fid
from emulation.cluster import CLUSTER_NODES, Cluster, ClusterError, parse_servers
from emulation.nodes import (
    SWITCH_MTU,
    NodeClasses,
    NodeSetupError,
    NvLinkBridge,
    P4Switch,
    StarHost,
    bmv2_missing,
    intf_name,
    log_tail,
    mininet_port,
    nic_intf,
    nvlink_intf,
)
from emulation.ports import free_ports
from emulation.rundir import (
    clean_run,
    holder_of,
    new_run_dir,
    reap_orphans,
    record_interfaces,
    register,
    unregister,
)
from emulation.spawn import LocalSpawner, Spawner
from emulation.switchproc import BMV2_P4INFO, compile_p4
from emulation.waiting import wait_until
from hostagent.tcpsettings import TcpSettingsError, allow_in_root_namespace, restore_allowed
from topologies.addressing import NVLINK_PREFIX, AddressPlan
from topologies.spec import Topology
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire import runfiles
from wire.adviceclient import channel
from wire.fidelity import create_file
from wire.p4info import DEFAULT_P4INFO, P4Schema
from wire.realtime import DEFAULT_PRIORITY, WATCHDOG_PRIORITY, RealtimeError, this_thread_at
from wire.runfiles import record_pid

CONTROLLER_READY_S = 60.0


def far_end_counters(intf: str) -> tuple[int, int]:
    """(sent, received) bytes of the node at the far end of a root-namespace interface: what the
    interface received, what it transmitted."""
    stats = Path("/sys/class/net") / intf / "statistics"
    return int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())


class TestbedError(RuntimeError):
    pass


def set_ports(names: list[str], state: str, priority: int, clock: Callable[[], float]) -> list[float]:
    """Interfaces of the root namespace up or down through netlink, from a thread of its own at
    real-time `priority` (0: normal): no shell in between, whose fork and exec a busy machine
    stalls, and not behind the real-time switches, which kept the kernel's work of closing a port
    waiting 0.1–0.7 s at normal priority beside a running ring. A thread of its own also because
    pyroute2's IPRoute will not start where an asyncio loop runs (Playwright's, in the tests).
    Returns clock() after each interface changed."""
    done: list[float] = []
    failed: list[BaseException] = []

    def change() -> None:
        try:
            with IPRoute() as ipr:  # at `priority`: a thread inherits its creator's policy
                for name in names:
                    ipr.link("set", ifname=name, state=state)
                    done.append(clock())
        except Exception as exc:  # noqa: BLE001 - raised in the caller's thread below
            failed.append(exc)

    with this_thread_at(priority):  # started at it too: a thread at normal priority waits to be run
        worker = threading.Thread(target=change, name="set-ports")
        worker.start()
        worker.join()
    if failed:
        raise TestbedError(f"setting {', '.join(names)} {state}: {failed[0]}") from failed[0]
    return done


def resolve_dataplane(dataplane: str) -> str:
    """auto → bmv2 when simple_switch_grpc and p4c-bm2-ss are on PATH, else soft."""
    if dataplane == "auto":
        return "soft" if bmv2_missing() else "bmv2"
    if dataplane not in ("soft", "bmv2"):
        raise TestbedError(f"--dataplane: unknown data plane {dataplane!r} (auto, soft or bmv2)")
    missing = bmv2_missing() if dataplane == "bmv2" else []
    if missing:
        raise TestbedError(f"--dataplane bmv2: {' and '.join(missing)} not found on PATH "
                           "(install p4lang's BMv2 and p4c packages, or use --dataplane soft)")
    return dataplane


class Testbed:
    __test__ = False  # not a pytest class

    def __init__(self, topo: Topology, *, dataplane: str = "auto", run_dir: Path | None = None,
                 name: str | None = None, bmv2_options: dict | None = None, int_sample_log2: int = 3,
                 mode: str = "none", agents: bool = True, controller_args: list[str] | None = None,
                 fidelity_tolerance_ms: float | None = None, realtime_priority: int = DEFAULT_PRIORITY,
                 nodes: NodeClasses | None = None, spawner: Spawner | None = None, servers: str | None = None,
                 ssh_key: Path | None = None) -> None:
        """bmv2_options: log_level (None = logging off), pcap_dir (opt-in pcaps) for BMv2 switches;
        int_sample_log2: INT on 1 in 2^N packets of each host flow (-1 = INT off);
        mode: none | ecn | advice | bbr; agents: start a host agent (pacer) on every host;
        controller_args: extra `python -m controller` options (e.g. ["--eta", "0.9"]);
        fidelity_tolerance_ms: the soft switches' late-event threshold (default wire/fidelity.py's);
        realtime_priority: SCHED_FIFO priority of the switches, the controller and the host agents
        one below (0: normal scheduling; _provision_realtime says why);
        nodes: the Mininet node and link classes (default: emulation/nodes.py's);
        spawner: starts and stops the testbed's processes (default: on this machine, emulation/spawn.py);
        servers: cluster mode (emulation/cluster.py) — "ns": the fabric split between this machine and a
        second server made on it (a network namespace with its own sshd); "srv2=ADDRESS,...": between this
        machine and those (reached by SSH as root with `ssh_key`; the project at the same path there, the
        run directory shared)."""
        self.fidelity_tolerance_ms = fidelity_tolerance_ms
        self.realtime_priority = realtime_priority
        self.started_at = 0.0
        self.last_verdict: fid.Verdict | None = None
        self.ready_at = 0.0  # wall time the fabric was up and programmed (verdicts start here)
        self.controller_args = list(controller_args or [])
        self.int_sample_log2 = int_sample_log2
        self.mode = mode
        self.switch_faults: dict[str, dict] = {}  # switch → injected delay_ms and port rates (emulation/faults.py)
        self.with_agents = agents
        self.agents: dict[str, subprocess.Popen] = {}
        self._unshare_api: Callable[[], None] | None = None  # cluster mode: the API's forwards to the servers
        self.topo = topo
        self.bmv2_options = bmv2_options or {}
        self.plan = AddressPlan(topo)
        self.dataplane = resolve_dataplane(dataplane)
        self.run_dir = run_dir or new_run_dir(name or topo.name)
        self.nodes = nodes or NodeClasses()
        self.spawner = spawner or LocalSpawner(self.run_dir)
        self.cluster: Cluster | None = None
        if servers is not None:
            try:
                self.cluster = (Cluster.on_namespace_server(self.run_dir, self.spawner, topo) if servers == "ns" else
                                Cluster.on_servers(self.run_dir, self.spawner, topo, parse_servers(servers), ssh_key))
            except ClusterError as exc:
                raise TestbedError(str(exc)) from None
            self.nodes, self.spawner = CLUSTER_NODES, self.cluster.spawner
        self.net: Mininet | None = None
        self.controller: subprocess.Popen | None = None
        self.switches: dict[str, P4Switch] = {}
        self.nvlinks: dict[str, NvLinkBridge] = {}  # server → its NVLink stand-in
        self._schemas: dict[Path, P4Schema] = {}  # P4Info file -> its schema (schema_of)
        self._allowed_cc_before: str | None = None  # the root namespace's list, if this testbed changed it
        self.cpu: cpuuse.CpuSampler | None = None  # cpu.csv: where the CPU goes, per window
        self._fidelity: fid.FidelityIndex | None = None  # fidelity.csv, read as it grows (verdict)
        self.server_samplers: dict[str, tuple[Spawner, subprocess.Popen]] = {}  # cluster: each server's own
        self.rtwatch: dict[str, tuple[Spawner, subprocess.Popen]] = {}  # the real-time watchdog of each machine

    # ---- bring-up ----------------------------------------------------------------------------
    def start(self) -> Testbed:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def fidelity_path(self) -> Path:
        return self.run_dir / fid.FIDELITY_CSV

    def _start(self) -> None:
        self.started_at = time.time()
        for line in reap_orphans():
            info(f"*** {line}\n")
        register(self.run_dir)
        (self.run_dir / runfiles.TOPOLOGY).write_text(self.topo.to_yaml())
        create_file(self.fidelity_path)
        self._fidelity = None
        self.cpu = cpuuse.CpuSampler(self.run_dir).start()
        try:
            self._allowed_cc_before = allow_in_root_namespace()
        except TcpSettingsError as exc:
            raise TestbedError(str(exc)) from None
        if self._allowed_cc_before is not None:
            info(f"*** Allowed cubic and bbr as host namespaces' congestion control (was: {self._allowed_cc_before})\n")
        if self.dataplane == "bmv2":
            info("*** Compiling p4src/starnet.p4 for BMv2\n")
            compile_p4()
        if self.cluster is not None:
            info(f"*** Starting servers {', '.join(self.cluster.servers)}\n")
            self.cluster.start()
            for server, spawner in self.cluster.spawners.items():  # cpu-<server>.csv: sampled there
                label = f"sampler-cpu-{server}"
                self.server_samplers[label] = (spawner, spawner.start(
                    label, [sys.executable, "-m", "emulation.cpuuse", "--run-dir", str(self.run_dir),
                            "--server", server], self.run_dir / f"{label}.log", new_session=True))
        net = self._build_network()
        self.spawner.add_hosts({host.name: host.pid for host in net.hosts})
        for host in net.hosts:
            if not getattr(host, "isRemote", False):  # a PID on another server is not this machine's
                record_pid(self.run_dir, f"host-{host.name}", host.pid)
            address = self.plan.hosts[host.name]
            host.setup_fabric(address.ip, address.gateway_ip, address.gateway_mac)
        for sw in net.switches:
            if not getattr(sw, "isRemote", False):
                record_pid(self.run_dir, f"shell-{sw.name}", sw.pid)
        self._start_nvlinks()
        info(f"*** Starting {len(self.switches)} {self.dataplane} switches\n")
        for sw in self.switches.values():
            sw.launch()
        if self.cluster is not None:
            self.cluster.start_forwards(list(self.switches))
        for sw in self.switches.values():
            sw.wait_ready()
        (self.run_dir / runfiles.SWITCHES).write_text(json.dumps({
            "dataplane": self.dataplane,
            "switches": {name: sw.process.describe() for name, sw in self.switches.items()},
        }, indent=1))
        info("*** Starting the controller\n")
        self._start_controller()
        if self.with_agents:
            info("*** Starting host agents\n")
            self._start_agents()
        if self.realtime_priority:
            self._provision_realtime()
        self.ready_at = time.time()

    def _build_network(self) -> Mininet:
        """The Mininet network of the topology: switches (their processes not started yet), hosts
        with their addresses, links with the interface names and MACs of the address plan."""
        net = Mininet(topo=None, controller=None, host=self.nodes.host, link=self.nodes.link, build=False,
                      autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.net = net  # from here on, stop() takes down whatever was built
        n = len(self.topo.switches)
        ports = free_ports(2 * n)
        switch_cls = self.nodes.soft_switch if self.dataplane == "soft" else self.nodes.bmv2_switch
        for i, sw in enumerate(self.topo.switches):
            shapes = {link.port_of(sw.name): (link.capacity_mbps, link.queue_pkts)
                      for link in self.topo.links_of(sw.name)}
            params = dict(device_id=self.plan.switches[sw.name].device_id, grpc_port=ports[i],
                          run_dir=self.run_dir, shapes=shapes, spawner=self.spawner)
            process_args: dict[str, Any] = {"realtime_priority": self.realtime_priority}
            if self.cluster is not None:
                params["spawner"], where = self.cluster.switch_params(sw.name)
                process_args.update(where)
                params.update(self.cluster.node_params(sw.name))
            if self.dataplane == "bmv2":
                process_args.update(thrift_port=ports[n + i], **self.bmv2_options)
            else:
                process_args["fidelity_tolerance_ms"] = self.fidelity_tolerance_ms
            params["process_args"] = process_args
            self.switches[sw.name] = net.addSwitch(sw.name, cls=switch_cls, **params)
        for host in self.topo.hosts:
            address = self.plan.hosts[host.name]
            net.addHost(host.name, ip=f"{address.ip}/32", mac=address.mac,
                        **(self.cluster.node_params(host.name) if self.cluster is not None else {}))
        self._claim_interfaces()
        for link in self.topo.links:
            kwargs: dict[str, int | str] = {}
            for end, node, port in (("1", link.a, link.a_port), ("2", link.b, link.b_port)):
                kwargs[f"port{end}"] = mininet_port(self.topo, node, port)
                kwargs[f"intfName{end}"] = intf_name(self.topo, node, port)
            # MACs of switch ports follow the address plan so next-hop rewrites match the wire.
            for end, node, port in (("1", link.a, link.a_port), ("2", link.b, link.b_port)):
                kwargs[f"addr{end}"] = self.plan.mac_of(node, None if self.topo.is_host(node) else port)
            if self.cluster is not None:
                kwargs["mtu"] = SWITCH_MTU  # a tunnel's: refused if the servers' network cannot carry it
            net.addLink(link.a, link.b, **kwargs)
        for server in self.topo.servers:  # NVLink: a bridge per server, a port per GPU (after its eth0)
            rates = {nvlink_intf(self.topo, gpu)[1]: self.topo.nvlink_mbps(gpu) for gpu in server.gpus}
            self.nvlinks[server.name] = net.addSwitch(server.name, cls=self.nodes.nvlink, rate_mbps=rates)
            for port, gpu in enumerate(server.gpus, 1):
                mine, bridge = nvlink_intf(self.topo, gpu)
                net.addLink(gpu, server.name, port1=len(self.topo.host_links(gpu)), port2=port, intfName1=mine,
                            intfName2=bridge)
        net.build()
        return net

    def _claim_interfaces(self) -> None:
        """Record the interfaces this fabric makes in the root namespace (switch ports, NVLink bridges and
        their ports) before any exists, after checking that none does: a clear error, not 'File exists'."""
        intfs = [intf_name(self.topo, node, port) for link in self.topo.links
                 for node, port in ((link.a, link.a_port), (link.b, link.b_port))
                 if self.topo.is_switch(node) and (self.cluster is None or self.cluster.is_local(node))]
        for server in self.topo.servers:
            intfs += [server.name] + [nvlink_intf(self.topo, gpu)[1] for gpu in server.gpus]
        if taken := [name for name in intfs if Path(f"/sys/class/net/{name}").exists()]:
            holder = holder_of(taken[0])
            raise TestbedError(
                f"interface {taken[0]} exists already" + (f" ({len(taken)} of this fabric's)" if len(taken) > 1 else "")
                + (f": the testbed of {holder} is running; stop it first" if holder else
                   ": a testbed outside this project's records made it; delete it (ip link del) and start again"))
        record_interfaces(self.run_dir, intfs)

    def _start_nvlinks(self) -> None:
        """Each server's NVLink stand-in up, and each GPU's port on it addressed and shaped."""
        assert self.net is not None
        if self.topo.servers:
            info(f"*** Joining the GPUs of {len(self.topo.servers)} servers by NVLink\n")
        try:
            for server in self.topo.servers:
                self.nvlinks[server.name].start([])
                for gpu in server.gpus:
                    self.net[gpu].setup_nvlink(nvlink_intf(self.topo, gpu)[0],
                                               f"{self.plan.nvlink[gpu]}/{NVLINK_PREFIX}", self.topo.nvlink_mbps(gpu))
        except NodeSetupError as exc:
            raise TestbedError(f"NVLink: {exc}") from None

    def set_nvlink_rate(self, gpu: str, mbps: float | None) -> float:
        """A degraded NVLink: `gpu`'s NVLink port shaped both ways at `mbps` (None: at its rate by the
        topology again). The wall time the change began."""
        assert self.net is not None
        server = self.topo.server_of(gpu)
        if server is None:
            raise TestbedError(f"{gpu} is not a GPU of a multi-GPU server in {self.topo.name}")
        if mbps is not None and mbps <= 0:
            raise TestbedError(f"NVLink of {gpu}: a rate must be > 0 Mbit/s, got {mbps:g}")
        rate = self.topo.nvlink_mbps(gpu) if mbps is None else mbps
        mine, bridge = nvlink_intf(self.topo, gpu)
        began = self.now()
        try:
            self.nvlinks[server.name].shape(bridge, rate)
            self.net[gpu].shape_nvlink(mine, rate)
        except NodeSetupError as exc:
            raise TestbedError(f"NVLink of {gpu}: {exc}") from None
        return began

    def nic_counters(self) -> dict[str, tuple[int, int]]:
        """Every host's NIC bytes (sent, received), from the counters of its switch port."""
        return {host.name: far_end_counters(nic_intf(self.topo, host.name)) for host in self.topo.hosts}

    def nvlink_counters(self) -> dict[str, tuple[int, int]]:
        """Every GPU's NVLink bytes (sent, received), from its port's counters at the bridge."""
        return {gpu: far_end_counters(nvlink_intf(self.topo, gpu)[1])
                for server in self.topo.servers for gpu in server.gpus}

    def _provision_realtime(self) -> None:
        """Real-time scheduling once the network is up: the control plane (controller and host
        agents) at SCHED_FIFO one below the switches (promoted when ready), and the watchdog that
        demotes any of them that holds a whole CPU (emulation/rtwatch.py). Both planes run before
        the hosts' workloads and the machine's other work; the switches' timing comes first.
        Measured on the demo (advice mode): the controller and agents at normal priority were
        starved for up to 0.5 s when the switches saturated both cores at the incast's onset
        (advice late: p99 queue 60, 84 drops); above the switches they delayed them (76% of
        windows faithful); at the switches' priority p99 3, no drop, 93% faithful; one below, p99
        1, no drop, 95% faithful, loop lag <= 19 ms."""
        self._end_rtwatch()
        # what each machine's watchdog watches: name → (its spawner there, PID there, log)
        watched: dict[str, dict[str, tuple[Spawner, int, Path]]] = {}

        def watch(spawner: Spawner, label: str, proc: subprocess.Popen, name: str, log: Path) -> None:
            there, pid = spawner.placed(label, proc)
            watched.setdefault(there.server, {})[name] = (there, pid, log)

        for name, sw in self.switches.items():
            if sw.process.proc is not None and sw.process.scheduling.startswith("fifo"):
                watch(sw.process.spawner, f"switch-{name}", sw.process.proc, name,
                      self.run_dir / runfiles.switch_log(name))
        if not watched:
            return  # the switches could not be promoted (not root): nor can the rest
        assert self.controller is not None
        control = {"controller": ("controller", self.controller, self.run_dir / runfiles.CONTROLLER_LOG),
                   **{name: (f"agent-{name}", proc, self.run_dir / runfiles.HOSTAGENTS / f"{name}.log")
                      for name, proc in self.agents.items()}}
        for name, (label, proc, log) in control.items():
            if self._to_control_priority(label, proc):
                watch(self.spawner, label, proc, name, log)
        # a watchdog per machine, on it (a runaway starves that machine's CPUs, not this one's)
        for server, processes in sorted(watched.items()):
            self._start_rtwatch(server, processes)

    def _start_rtwatch(self, server: str, processes: dict[str, tuple[Spawner, int, Path]]) -> None:
        spawner = next(iter(processes.values()))[0]
        label = "rtwatch" if server == "localhost" else f"rtwatch-{server}"
        log_path = self.run_dir / (runfiles.RTWATCH_LOG if server == "localhost" else f"rtwatch-{server}.log")
        watches = [f"--watch={name}={pid}={log}" for name, (_, pid, log) in processes.items()]
        rtwatch = spawner.start(label, [sys.executable, "-m", "emulation.rtwatch", *watches], log_path,
                                new_session=True)
        self.rtwatch[label] = (spawner, rtwatch)
        # Its own start-up at its priority too: a runaway from the first moment must not starve it.
        spawner.promote(label, rtwatch, WATCHDOG_PRIORITY)
        if not wait_until(lambda: "watching" in log_path.read_text() or rtwatch.poll() is not None, 10.0) \
                or rtwatch.poll() is not None:
            raise TestbedError(f"the real-time watchdog on {server} did not start:\n{log_tail(log_path)}")

    def _end_rtwatch(self) -> None:
        for label, (spawner, proc) in self.rtwatch.items():
            spawner.stop(label, proc)
        self.rtwatch = {}

    def _start_controller(self) -> None:
        log_path = self.run_dir / runfiles.CONTROLLER_OUT
        self.controller = self.spawner.start(
            "controller", [sys.executable, "-m", "controller", "--run-dir", str(self.run_dir),
                           "--int-sample-log2", str(self.int_sample_log2), "--mode", self.mode,
                           "--fidelity-file", str(self.fidelity_path),
                           *(["--api-socket", str(self.cluster.api_socket)] if self.cluster is not None else []),
                           *self.controller_args],
            log_path, new_session=True)
        ready = self.run_dir / runfiles.CONTROLLER_READY
        deadline = time.monotonic() + CONTROLLER_READY_S
        while not ready.exists():
            if self.controller.poll() is not None:
                raise TestbedError(f"the controller exited ({self.controller.returncode}):\n"
                                   f"{log_tail(log_path)}\n{log_tail(self.run_dir / 'controller.log')}")
            if time.monotonic() > deadline:
                raise TestbedError(f"the controller did not program the fabric within {CONTROLLER_READY_S:.0f} s:\n"
                                   f"{log_tail(self.run_dir / 'controller.log')}")
            time.sleep(0.1)
        if self.cluster is not None and self._unshare_api is None:  # its address, the same on every server
            self._unshare_api = self.spawner.share("api", self.cluster.api_socket)

    def _start_agents(self) -> None:
        assert self.net is not None, "agents start after the network is built"
        (self.run_dir / runfiles.HOSTAGENTS).mkdir(exist_ok=True)
        for host in self.net.hosts:
            address = self.plan.hosts[host.name]
            self.agents[host.name] = self.spawner.start(
                f"agent-{host.name}", [sys.executable, "-m", "hostagent", "--run-dir", str(self.run_dir),
                                       "--host", host.name, "--ip", address.ip, "--intf", host.defaultIntf().name,
                                       "--fidelity-file", str(self.run_dir / runfiles.server_fidelity(
                                           self.cluster.server_of.get(host.name, "localhost")
                                           if self.cluster is not None else "localhost"))],
                self.run_dir / runfiles.HOSTAGENTS / f"{host.name}.out", host=host.name, new_session=True)
        deadline = time.monotonic() + 20
        for name, proc in self.agents.items():
            log = self.run_dir / runfiles.HOSTAGENTS / f"{name}.log"
            while not (log.exists() and "registered" in log.read_text()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise TestbedError(f"host agent {name} did not register:\n"
                                       f"{log_tail(self.run_dir / 'hostagents' / f'{name}.out')}\n{log_tail(log)}")
                time.sleep(0.05)

    def restart_controller(self) -> None:
        """End the controller and start it again (agents must reconnect on their own)."""
        self._end_controller()
        (self.run_dir / runfiles.CONTROLLER_READY).unlink(missing_ok=True)
        self._start_controller()
        if self.realtime_priority:
            self._provision_realtime()

    def _end_controller(self) -> None:
        if self.controller is not None:
            self.spawner.stop("controller", self.controller)
            self.controller = None

    # ---- tear-down ---------------------------------------------------------------------------
    def stop(self) -> None:
        for proc in self.agents.values():  # all told at once, then each waited for
            if proc.poll() is None:
                proc.terminate()
        for name, proc in self.agents.items():
            self.spawner.stop(f"agent-{name}", proc)
        self.agents = {}
        self._end_controller()
        if self._unshare_api is not None:
            self._unshare_api()
            self._unshare_api = None
        self._end_rtwatch()
        if self.net is not None:
            for host in self.net.hosts:
                if getattr(host, "isRemote", False):
                    continue  # its server's processes: ended with what the cluster started there
                if host.shell is not None and (left := host.end_processes()):
                    info(f"*** ended {len(left)} process(es) left in {host.name}: {left}\n")
            try:
                self.net.stop()
            finally:
                self.net = None
        for label, (spawner, proc) in self.server_samplers.items():
            spawner.stop(label, proc)
        self.server_samplers = {}
        if self.cluster is not None:
            self.cluster.stop()
        clean_run(self.run_dir)
        unregister(self.run_dir)
        if self._allowed_cc_before is not None:
            restore_allowed(self._allowed_cc_before)
            self._allowed_cc_before = None
        (self.run_dir / runfiles.STOPPED).write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
        if self.cpu is not None:
            self.cpu.stop()
        if self.ready_at:
            self.last_verdict = self.verdict(self.ready_at, time.time())
            line = f"fidelity: {self.last_verdict.line()}"
            (self.run_dir / runfiles.FIDELITY_TXT).write_text(line + "\n" + "".join(
                f"  flagged {entry}\n" for entry in self.last_verdict.flagged_lines()))
            info(f"*** {line}\n")
            self.ready_at = 0.0

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- helpers for tests and the CLI -------------------------------------------------------
    def host(self, name: str) -> StarHost:
        assert self.net is not None
        return self.net.get(name)

    @staticmethod
    def now() -> float:
        """Wall-clock time, the clock of every run record (fidelity.csv, telemetry.csv, host agents)."""
        return time.time()

    def start_sampler(self, label: str, argv: list[str], log: Path | None = None) -> subprocess.Popen:
        """A measuring process in the root namespace (lab/tcpstate.py's TCP state sampler), at the
        control plane's real-time priority so it samples on time beside the switches: at normal
        priority its 10 ms samples stopped for 120 ms beside a running ring, and the measure read
        that blindness as a stall of the flow it watched."""
        proc = self.spawner.start(label, argv, log)
        if self.realtime_priority:
            self._to_control_priority(label, proc)
        return proc

    def _to_control_priority(self, label: str, proc: subprocess.Popen) -> bool:
        """The process started under `label` at SCHED_FIFO one below the switches (the control plane's
        priority), on its machine; False, said on the console, where it may not be."""
        try:
            self.spawner.promote(label, proc, max(1, self.realtime_priority - 1))
        except RealtimeError as exc:
            info(f"*** {label} stays at normal priority: {exc}\n")
            return False
        return True

    def verdict(self, t0: float, t1: float, switches: list[str] | None = None) -> fid.Verdict:
        """Fidelity of wall-clock [t0, t1) on `switches` (default: all), from the run's fidelity files
        (fidelity.csv, and each other server's in cluster mode), read once as they grow."""
        sampled = [name for name, sw in self.switches.items() if sw.kind != "soft"]
        if self._fidelity is None:
            self._fidelity = fid.FidelityIndex(self.fidelity_path)
        records = self._fidelity.records(*fid.window_span(t0, t1))
        result = fid.verdict(records, t0, t1, switches, self.ready_at or t0, sampled)
        result.cpu = cpuuse.usage(self.run_dir / cpuuse.CPU_CSV, t0, t1)
        for server, cores in (self.cluster.cores.items() if self.cluster is not None else ()):
            if (used := cpuuse.usage(self.run_dir / runfiles.server_cpu(server), t0, t1, cores)) is not None:
                result.cpu_servers[server] = used
        return result

    def who_took_the_machine(self) -> str:
        """The processes outside this run that used the most CPU since it started (for failures)."""
        top = self.cpu.top_others() if self.cpu is not None else []
        if not top:
            return "no process outside the testbed used more than 0.05 s of CPU"
        return "outside the testbed, most CPU since it started: " + ", ".join(
            f"{name} (pid {pid}) {seconds:.1f} s" for name, pid, seconds in top)

    def set_link(self, a: str, b: str, up: bool) -> tuple[float, float]:
        """Take the link a–b down (both ends, as a cut cable) or up again. Returns two wall times:
        when the change began (its onset) and when the kernel had changed the link's carrier (down:
        the first end closed, its peer's carrier gone; up: both ends open). The change runs at the
        switches' real-time priority (set_ports): at normal priority the kernel's work of closing a
        port waited 0.1–0.7 s behind them beside a running ring (5 ms on a quiet machine)."""
        assert self.net is not None
        if not self.topo.is_nvlink(a, b):  # a GPU's NVLink port is cut as a link of its own: (GPU, server)
            self.topo.find_link(a, b)  # TopologyError naming both ends when there is no such link
        state = "up" if up else "down"
        ends = [intf for pair in self.net[a].connectionsTo(self.net[b]) for intf in pair]
        # a switch's end here: the root namespace's netlink; elsewhere (cluster mode) and a host's end,
        # after it: through the node's shell, as Mininet does
        here = [intf for intf in ends if not intf.node.inNamespace and not getattr(intf.node, "isRemote", False)]
        began = self.now()
        done = set_ports([intf.name for intf in here], state, self.realtime_priority, self.now)
        for intf in ends:
            if intf not in here:
                intf.ifconfig(state)
                done.append(self.now())
        return began, (done[-1] if up else done[0])

    def links_timeline(self) -> list[dict]:
        """The controller's link timeline (links.csv): one row per link that failed or came back."""
        return runfiles.read_rows(self.run_dir / runfiles.LINKS)

    def set_mode(self, mode: str, timeout_s: float = 5.0) -> None:
        """Switch the control mode (the controller's SetMode) and wait until every host agent has
        applied it (hostagents/<host>.mode), so TCP connections opened next get the mode's ECN and
        congestion control."""
        with channel(self.run_dir) as ch:
            reply = pb_grpc.AdviceStub(ch).SetMode(pb.ModeRequest(mode=mode), timeout=timeout_s)
        if reply.mode != mode:
            raise TestbedError(f"mode: the controller answered {reply.mode!r} to {mode!r}")
        self.mode = mode
        deadline = time.monotonic() + timeout_s
        waiting = list(self.agents)
        while waiting:
            waiting = [name for name in waiting if runfiles.read_agent_mode(self.run_dir, name) != mode]
            if waiting and time.monotonic() > deadline:
                raise TestbedError(f"mode {mode}: host agents {', '.join(waiting)} did not apply it within "
                                   f"{timeout_s:g} s (see {self.run_dir / 'hostagents'})")
            if waiting:
                time.sleep(0.02)

    def schema_of(self, name: str) -> P4Schema:
        """The P4Info switch `name` runs: p4c's output on BMv2, the committed one on the soft switch
        (each loaded once per testbed)."""
        path = BMV2_P4INFO if self.switches[name].kind == "bmv2" else DEFAULT_P4INFO
        if path not in self._schemas:
            self._schemas[path] = P4Schema.load(path)
        return self._schemas[path]

    @property
    def live_url(self) -> str | None:
        """Where the controller serves the live page (controller/live.py); None: not served."""
        path = self.run_dir / runfiles.LIVE_ADDR
        return f"http://{path.read_text().strip()}/" if path.exists() else None

    @property
    def metrics_url(self) -> str | None:
        """Where the controller serves Prometheus /metrics (controller/metrics.py); None: not served."""
        path = self.run_dir / runfiles.METRICS_ADDR
        return f"http://{path.read_text().strip()}/metrics" if path.exists() else None

    def switch_stats(self, name: str) -> dict:
        """The soft switch's own per-port queue/drop counters (written every 0.5 s)."""
        path = self.run_dir / runfiles.switch_stats(name)
        return json.loads(path.read_text())
