"""Mininet node classes: P4 switches (soft or BMv2, see emulation/switchproc.py), hosts, and the
NVLink stand-in that joins a multi-GPU server's GPUs."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mininet.link import Link
from mininet.node import Host, Switch

from emulation.spawn import Spawner
from emulation.switchproc import (
    Bmv2SwitchProcess,
    SoftSwitchProcess,
    SwitchProcess,
    SwitchStartError,
    bmv2_missing,
    log_tail,
)
from hostagent.tcpsettings import CUBIC
from topologies.addressing import nvlink_intf
from topologies.spec import Topology
from wire.cpu import CPU_PORT

SWITCH_MTU = 9000
NVLINK_MTU = 9000
NVLINK_QUEUE_S = 0.010  # the longest a frame waits in an NVLink port's shaper


class NodeSetupError(RuntimeError):
    """A command that sets up a node's interfaces failed (the message has the command and its error)."""


def run_checked(cmd: list[str], *, error: type[Exception] = NodeSetupError, timeout_s: float | None = None) -> str:
    """cmd's standard output; `error` naming the command and its stderr (or exit status) if it failed
    or gave no answer in timeout_s."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise error(f"{shlex.join(cmd)}: no answer in {timeout_s:g} s") from None
    if done.returncode:
        raise error(f"{shlex.join(cmd)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def tbf_args(rate_mbps: float) -> str:
    """tc's TBF at `rate_mbps`: a bucket of 2 ms at the rate (at least two jumbo frames), frames
    queued at most NVLINK_QUEUE_S."""
    burst = max(2 * (NVLINK_MTU + 14), int(rate_mbps * 1e6 / 8 * 0.002))
    return f"tbf rate {rate_mbps * 1e6:.0f}bit burst {burst} latency {NVLINK_QUEUE_S * 1e3:.0f}ms"

__all__ = ["CPU_PORT", "P4Switch", "SoftP4Switch", "BMv2Switch", "StarHost", "NvLinkBridge", "NodeClasses",
           "NodeSetupError", "SwitchStartError", "bmv2_missing", "log_tail", "intf_name", "mininet_port",
           "nvlink_intf", "SWITCH_MTU", "run_checked"]


def quiet(cmd: list[str]) -> None:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def switch_intf_script(name: str) -> str:
    """The shell commands that prepare a switch port, here or on another server (emulation/cluster.py):
    offloads off (a frame read by AF_PACKET must be complete), IPv6 off, MTU 9000 (INT makes a
    full-sized frame longer than 1500 bytes); "ok" last when the MTU was taken, else ip's error."""
    q = shlex.quote(name)
    return (f"ethtool -K {q} tx off tso off gso off gro off >/dev/null 2>&1; "
            f"echo 1 2>/dev/null > /proc/sys/net/ipv6/conf/{q}/disable_ipv6; "
            f"ip link set {q} mtu {SWITCH_MTU} 2>&1 && echo ok")


def prepare_switch_intf(name: str) -> None:
    quiet(["sh", "-c", switch_intf_script(name)])


class P4Switch(Switch):
    """A Mininet switch whose data plane is a P4 switch process (process_cls) in the root namespace.

    device_id: P4Runtime device id; grpc_port: per-run TCP port; run_dir: run directory;
    shapes: {port: (rate_mbps, depth_pkts)} for the egress queues; process_args: extra
    arguments of the process class (BMv2's thrift_port, log_level, pcap_dir).
    """

    process_cls: type[SwitchProcess] = SwitchProcess

    def __init__(self, name: str, device_id: int, grpc_port: int, run_dir: Path,
                 shapes: dict[int, tuple[float, int]], process_args: dict[str, Any] | None = None,
                 spawner: Spawner | None = None, **params: Any) -> None:
        super().__init__(name, dpid=f"{device_id:016x}", **params)
        self.process = self.process_cls(name, device_id, grpc_port, run_dir, [], shapes, spawner=spawner,
                                        **(process_args or {}))

    kind = property(lambda self: self.process.kind)
    device_id = property(lambda self: self.process.device_id)
    grpc_address = property(lambda self: self.process.grpc_address)
    proc = property(lambda self: self.process.proc)

    def port_intfs(self) -> list[tuple[int, str]]:
        return sorted((port, intf.name) for port, intf in self.intfs.items() if intf.name != "lo")

    def launch(self) -> None:
        for _, intf in self.port_intfs():
            self.prepare_intf(intf)
        self.process.ports = self.port_intfs()
        self.process.launch()

    def prepare_intf(self, name: str) -> None:
        prepare_switch_intf(name)

    def wait_ready(self) -> None:
        self.process.wait_ready()

    def start(self, controllers: list[Any]) -> None:  # Mininet API
        self.launch()
        self.wait_ready()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet API)
        self.process.stop()
        super().stop(deleteIntfs)


class SoftP4Switch(P4Switch):
    process_cls = SoftSwitchProcess


class BMv2Switch(P4Switch):
    process_cls = Bmv2SwitchProcess


class NvLinkBridge(Switch):
    """A server's NVLink stand-in: a Linux bridge in the root namespace joining its GPUs' NVLink
    ports, each port shaped both ways at `rate_mbps` (its ratio times its GPU's NIC; TBF, at the
    bridge's end what the GPU receives, at the GPU's end — StarHost.setup_nvlink — what it sends).
    Never a P4 switch: the soft switch's per-packet cost stays on the NICs' traffic, and the
    kernel's port counters are the NVLink's own."""

    def __init__(self, name: str, rate_mbps: dict[str, float] | None = None, **params: Any) -> None:
        super().__init__(name, **params)
        self.rate_mbps = rate_mbps or {}  # port interface → rate

    def port_intfs(self) -> list[str]:
        return [intf.name for _, intf in sorted(self.intfs.items()) if intf.name != "lo"]

    def start(self, controllers: list[Any]) -> None:  # Mininet API
        run_checked(["ip", "link", "add", "name", self.name, "type", "bridge"])
        _no_ipv6(self.name)
        for intf in self.port_intfs():
            run_checked(["ip", "link", "set", intf, "mtu", str(NVLINK_MTU), "master", self.name, "up"])
            _no_ipv6(intf)
            if intf in self.rate_mbps:
                self.shape(intf, self.rate_mbps[intf])
        run_checked(["ip", "link", "set", self.name, "up"])

    @staticmethod
    def shape(intf: str, rate_mbps: float) -> None:
        """What a GPU receives over its NVLink port `intf` (the bridge's end), shaped at rate_mbps."""
        run_checked(["tc", "qdisc", "replace", "dev", intf, "root", *tbf_args(rate_mbps).split()])

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet API)
        quiet(["ip", "link", "del", self.name])
        super().stop(deleteIntfs)


def _no_ipv6(name: str) -> None:
    try:
        Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1")
    except OSError:
        pass


class StarHost(Host):
    """A host with offloads and IPv6 off, a /32 address and an on-link default route via the leaf."""

    def setup_fabric(self, ip: str, gateway_ip: str, gateway_mac: str) -> None:
        intf = self.defaultIntf().name
        self.cmd(f"ethtool -K {intf} tx off tso off gso off gro off >/dev/null 2>&1")
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
        # cubic until a host agent applies its mode (a new namespace inherits the root's default)
        self.cmd(f"sysctl -qw net.ipv4.tcp_congestion_control={CUBIC}")
        self.cmd(f"ip route replace default via {gateway_ip} dev {intf} onlink")
        self.cmd(f"ip neigh replace {gateway_ip} lladdr {gateway_mac} dev {intf} nud permanent")

    def setup_nvlink(self, intf: str, address: str, rate_mbps: float) -> None:
        """A GPU's NVLink port: its address on the server's subnet, jumbo frames, what it sends
        shaped at `rate_mbps` (what it receives is shaped at the bridge's end)."""
        for command in (f"ip addr add {address} dev {intf}", f"ip link set {intf} mtu {NVLINK_MTU} up"):
            self._checked(command)
        self.shape_nvlink(intf, rate_mbps)

    def shape_nvlink(self, intf: str, rate_mbps: float) -> None:
        """What this GPU sends over its NVLink port `intf`, shaped at rate_mbps."""
        self._checked(f"tc qdisc replace dev {intf} root {tbf_args(rate_mbps)}")

    def _checked(self, command: str) -> None:
        out = self.cmd(f"{command} 2>&1 && echo ok").strip()
        if not out.endswith("ok"):
            raise NodeSetupError(f"{self.name}: {command}: {out}")

    def end_processes(self, grace_s: float = 2.0) -> list[int]:
        """End what was started inside this host's network namespace and outlived its shell's
        job control (daemonised iperf3 servers, `cmd ... &` jobs): SIGTERM, then SIGKILL after
        `grace_s`. Only processes in this namespace, never the host's shell or anything outside."""
        mine = _netns(self.pid)
        if mine is None or mine == _netns(os.getpid()):
            return []
        pids = [pid for pid in _pids() if pid != self.pid and _netns(pid) == mine]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_netns(pid) == mine for pid in pids):
            time.sleep(0.05)
        for pid in pids:
            if _netns(pid) == mine:
                _signal(pid, signal.SIGKILL)
        return pids


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class NodeClasses:
    """The Mininet classes a testbed is built of (Mininet takes them as arguments too)."""

    soft_switch: type[P4Switch] = SoftP4Switch
    bmv2_switch: type[P4Switch] = BMv2Switch
    host: type[Host] = StarHost
    link: type[Link] = Link
    nvlink: type[Switch] = NvLinkBridge


def mininet_port(topo: Topology, node: str, port: int) -> int:
    """Mininet's port number of a topology port: a switch's as given; a host's from 0 (its k-th
    interface, eth<k-1>), so a one-link host has eth0 as every program on it expects."""
    return port if topo.is_switch(node) else port - 1


def intf_name(topo: Topology, node: str, port: int) -> str:
    """The interface of `node`'s topology port: s3-eth2 is s3's port 2; h1-eth0 is h1's first."""
    return f"{node}-eth{mininet_port(topo, node, port)}"


def nic_intf(topo: Topology, host: str) -> str:
    """The switch's end of a one-NIC host's link, in the root namespace: it receives what the host
    sends."""
    link = topo.host_link(host)
    switch = link.other(host)
    return f"{switch}-eth{link.port_of(switch)}"


