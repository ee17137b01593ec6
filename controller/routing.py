"""Routes and ECMP groups from the topology: every shortest path, next hops per (switch, host).

Pure functions: given a topology, its address plan and the set of usable links, compute what
each switch's ipv4_lpm, ecmp_selector, port_role and port_config should hold.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire.cpu import ROLE_FABRIC, ROLE_HOST


@dataclass(frozen=True, order=True)
class NextHop:
    """port: egress port; smac: this switch's port MAC; dmac: the neighbour's MAC on that link."""

    port: int
    smac: str
    dmac: str


@dataclass(frozen=True)
class Route:
    prefix: str
    prefix_len: int
    next_hops: tuple[NextHop, ...]


@dataclass(frozen=True)
class PortConfig:
    port: int
    role: int
    capacity_mbps: float
    queue_pkts: int
    ecn_threshold_pkts: int


def _distances(topo: Topology, target: str, down: set[frozenset[str]]) -> dict[str, int]:
    """Hop distance from every switch to host `target` over links not in `down`."""
    dist = {target: 0}
    frontier = deque([target])
    while frontier:
        node = frontier.popleft()
        for neighbour, link in topo.neighbours(node):
            if frozenset((link.a, link.b)) in down or neighbour in dist:
                continue
            if topo.is_host(neighbour):
                continue
            dist[neighbour] = dist[node] + 1
            frontier.append(neighbour)
    return dist


def compute_routes(topo: Topology, plan: AddressPlan,
                   down: set[frozenset[str]] | None = None) -> dict[str, list[Route]]:
    """Per switch, a /32 route per reachable host with all shortest-path next hops."""
    down = down or set()
    routes: dict[str, list[Route]] = {s.name: [] for s in topo.switches}
    for host in topo.hosts:
        address = plan.hosts[host.name]
        dist = _distances(topo, host.name, down)
        for switch in topo.switches:
            here = dist.get(switch.name)
            if here is None:
                continue
            hops = []
            for neighbour, link in topo.neighbours(switch.name):
                if frozenset((link.a, link.b)) in down or dist.get(neighbour) != here - 1:
                    continue
                port = link.port_of(switch.name)
                hops.append(NextHop(port, plan.mac_of(switch.name, port),
                                    plan.mac_of(neighbour, link.port_of(neighbour))))
            if hops:
                routes[switch.name].append(Route(address.ip, 32, tuple(sorted(hops))))
    return routes


def port_configs(topo: Topology, switch: str, ecn_fraction: float = 0.25) -> list[PortConfig]:
    """port_role and port_config rows for `switch` from its links' capacities and queue depths."""
    out = []
    for neighbour, link in topo.neighbours(switch):
        role = ROLE_HOST if topo.is_host(neighbour) else ROLE_FABRIC
        threshold = max(1, int(link.queue_pkts * ecn_fraction))
        out.append(PortConfig(link.port_of(switch), role, link.capacity_mbps, link.queue_pkts, threshold))
    return sorted(out, key=lambda p: p.port)
