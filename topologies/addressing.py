"""Addressing plan: host IPs/MACs, gateway addresses, switch device ids and port MACs.

Hosts get /32 addresses 10.0.<switch index>.<port> with a default route via the gateway
10.0.<switch index>.254 on-link, whose MAC is the switch port's (installed as a static
neighbour), so every packet crosses the fabric as routed L3 and no switch needs ARP.
A GPU in a server also has an NVLink address, 10.1.<server index>.<GPU index> on the server's /24:
on-link through the server's NVLink stand-in, never through a switch.
gRPC/Thrift ports are not here: they are allocated per run (emulation.ports).
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.spec import Topology, TopologyError

NVLINK_NET = "10.1"
NVLINK_PREFIX = 24


@dataclass(frozen=True)
class HostAddress:
    name: str
    ip: str
    mac: str
    gateway_ip: str
    gateway_mac: str
    switch: str
    switch_port: int


@dataclass(frozen=True)
class SwitchAddress:
    name: str
    device_id: int
    index: int

    def port_mac(self, port: int) -> str:
        return f"02:53:{(self.index >> 8) & 0xFF:02x}:{self.index & 0xFF:02x}:00:{port:02x}"


class AddressPlan:
    def __init__(self, topo: Topology) -> None:
        if len(topo.switches) > 250:
            raise TopologyError(f"switches: {len(topo.switches)} switches exceed the plan's 250")
        self.topo = topo
        self.switches: dict[str, SwitchAddress] = {
            s.name: SwitchAddress(s.name, device_id=i + 1, index=i + 1) for i, s in enumerate(topo.switches)
        }
        self.hosts: dict[str, HostAddress] = {}
        for host in topo.hosts:
            link = topo.host_link(host.name)
            switch = link.other(host.name)
            sw = self.switches[switch]
            port = link.port_of(switch)
            self.hosts[host.name] = HostAddress(
                name=host.name,
                ip=f"10.0.{sw.index}.{port}",
                mac=f"00:00:0a:00:{sw.index:02x}:{port:02x}",
                gateway_ip=f"10.0.{sw.index}.254",
                gateway_mac=sw.port_mac(port),
                switch=switch,
                switch_port=port,
            )
        self._by_ip = {h.ip: h for h in self.hosts.values()}
        if len(topo.servers) > 250:
            raise TopologyError(f"servers: {len(topo.servers)} servers exceed the plan's 250")
        self.nvlink: dict[str, str] = {}  # GPU → its NVLink address (no prefix)
        for k, server in enumerate(topo.servers, 1):
            if len(server.gpus) > 253:
                raise TopologyError(f"servers[{k - 1}].gpus: {len(server.gpus)} GPUs exceed the plan's 253 per server")
            for g, gpu in enumerate(server.gpus, 1):
                self.nvlink[gpu] = f"{NVLINK_NET}.{k}.{g}"

    def host_by_ip(self, ip: str) -> HostAddress:
        return self._by_ip[ip]

    def mac_of(self, node: str, port: int | None = None) -> str:
        """MAC of a host, or of a switch's port."""
        if node in self.hosts:
            return self.hosts[node].mac
        if port is None:
            raise ValueError(f"switch {node}: a port is needed for its MAC")
        return self.switches[node].port_mac(port)


def nvlink_intf(topo: Topology, gpu: str) -> tuple[str, str]:
    """A GPU's NVLink port: (its end, in its namespace; the bridge's end, in the root namespace, where
    the controller reads its counters)."""
    server = topo.server_of(gpu)
    assert server is not None, gpu
    return f"{gpu}-nvl0", f"{server.name}-nvl{server.gpus.index(gpu)}"
