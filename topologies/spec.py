"""Topology spec: switches, hosts and links with capacity (Mbps) and queue depth (packets).

YAML form::

    name: my-fabric
    defaults: {capacity_mbps: 20, queue_pkts: 64}
    switches: [{name: s1, role: spine}, {name: s3, role: leaf}]
    hosts: [{name: h1}]
    links: [{a: h1, b: s3}, {a: s3, b: s1, capacity_mbps: 40}]
    servers: [{name: srv1, gpus: [h1, h2], nvlink_ratio: 8}]   # optional

A server holds GPUs: each GPU is a host of its own (its own namespace and NIC, on its rail's leaf)
and the server's GPUs are joined by an NVLink stand-in that never crosses a P4 switch, at
``nvlink_ratio`` times each GPU's NIC rate (``defaults.nvlink_ratio``, 8 unless given).

Validation errors name the offending field: ``links[3].b: unknown node 's9'``.
Port numbers are assigned per node in link order (1, 2, ...) unless a link gives
``a_port``/``b_port``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from wire.cpu import CPU_PORT
from wire.yamlfile import Fields, parse_yaml, read_file

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*[0-9]+$")
MAX_PORT = CPU_PORT - 1  # topology ports are 1..254, below the CPU port
SWITCH_ROLES = ("spine", "leaf", "core", "agg", "edge", "switch")
DEFAULT_CAPACITY_MBPS = 20.0
DEFAULT_QUEUE_PKTS = 64
MAX_CAPACITY_MBPS = 100_000.0  # 100 Gbit/s: far past what an emulated link carries
DEFAULT_NVLINK_RATIO = 8.0  # NVLink : NIC per GPU (SimAI's H100: 2,880 vs 400 Gbit/s, 7.2:1)
MAX_NVLINK_RATIO = 1000.0
MAX_QUEUE_PKTS = (1 << 19) - 1  # v1model's enq_qdepth and starnet.p4's ECN threshold are 19 bits


class TopologyError(ValueError):
    """A topology spec is invalid; the message starts with the field path."""


@dataclass(frozen=True)
class Switch:
    name: str
    role: str = "switch"


@dataclass(frozen=True)
class Host:
    """An endpoint. nics: how many links it has (its NICs, eth0.. in port order); a server with a NIC
    per GPU on rails has several, every other part of the testbed takes one (host_link says so)."""

    name: str
    nics: int = 1


@dataclass(frozen=True)
class Server:
    """A multi-GPU server: its GPUs (hosts, one NIC each, in NVLink port order) and their NVLink
    stand-in's rate as a multiple of each GPU's NIC rate."""

    name: str
    gpus: tuple[str, ...]
    nvlink_ratio: float = DEFAULT_NVLINK_RATIO


LinkId = tuple[str, int | str]
"""One direction of a link, named by where it is sent from: (switch, egress port), or
(NIC, host) for what a host sends into its own link. The INT collector keys port state by it, the
advisor's demands and capacities use it, and routing's next hops map to it."""
NIC = "nic"


def egress_link(switch: str, port: int) -> LinkId:
    return (switch, port)


def nic_link(host: str) -> LinkId:
    return (NIC, host)


@dataclass(frozen=True)
class Link:
    """A bidirectional link. capacity_mbps: rate of each direction; queue_pkts: egress queue depth."""

    a: str
    b: str
    a_port: int
    b_port: int
    capacity_mbps: float
    queue_pkts: int

    def other(self, node: str) -> str:
        return self.b if node == self.a else self.a

    def port_of(self, node: str) -> int:
        return self.a_port if node == self.a else self.b_port

    def directions(self) -> tuple[tuple[str, int, str, int], tuple[str, int, str, int]]:
        """Both directions as (sender, its port, receiver, its port)."""
        return (self.a, self.a_port, self.b, self.b_port), (self.b, self.b_port, self.a, self.a_port)


@dataclass
class Topology:
    name: str
    switches: list[Switch]
    hosts: list[Host]
    links: list[Link]
    defaults: dict[str, Any] = field(default_factory=dict)
    servers: list[Server] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._switch_names = {s.name for s in self.switches}
        self._host_names = {h.name for h in self.hosts}
        self._server_of = {gpu: server for server in self.servers for gpu in server.gpus}
        # a node's links, in the order of `links`: routing asks for them per host per switch, and a scan
        # of every link each time made a k=8 fat-tree's routes take 7 s
        self._links_of: dict[str, list[Link]] = {}
        for link in self.links:
            for end in dict.fromkeys((link.a, link.b)):
                self._links_of.setdefault(end, []).append(link)

    def server_of(self, host: str) -> Server | None:
        """The server a GPU is in (None: a host of its own)."""
        return self._server_of.get(host)

    def is_nvlink(self, a: str, b: str) -> bool:
        """Whether a–b names a GPU's NVLink port: the GPU and its server, either way round."""
        return any((server := self.server_of(gpu)) is not None and server.name == other
                   for gpu, other in ((a, b), (b, a)))

    def nvlink_mbps(self, gpu: str) -> float:
        """The rate of a GPU's NVLink port, each way: its server's ratio times its NIC's rate."""
        server = self.server_of(gpu)
        if server is None:
            raise TopologyError(f"host {gpu} is in no server: it has no NVLink")
        return server.nvlink_ratio * self.host_link(gpu).capacity_mbps

    def is_switch(self, name: str) -> bool:
        return name in self._switch_names

    def is_host(self, name: str) -> bool:
        return name in self._host_names

    def links_of(self, node: str) -> list[Link]:
        return list(self._links_of.get(node, ()))

    def host_links(self, host: str) -> list[Link]:
        """The host's links, one per NIC, in port order (eth0 first)."""
        return sorted(self.links_of(host), key=lambda link: link.port_of(host))

    def edge_and_pod(self, host: str) -> tuple[str, str]:
        """The switch a one-NIC host hangs from (its edge) and its pod, named by the switches above
        that edge (a fat-tree's pod shares its aggregation switches; a leaf-spine is one pod)."""
        edge = self.host_link(host).other(host)
        above = sorted(n for n, _ in self.neighbours(edge) if self.is_switch(n))
        return edge, "+".join(above)

    def host_link(self, host: str) -> Link:
        """The link of a one-NIC host; TopologyError for a host with several (a part of the testbed
        that calls this addresses, routes or paces one NIC per host)."""
        links = self.links_of(host)
        if len(links) != 1:
            raise TopologyError(f"host {host} has {len(links)} NICs; the address plan, routing and pacing "
                                f"take one NIC per host")
        return links[0]

    def neighbours(self, node: str) -> list[tuple[str, Link]]:
        return [(link.other(node), link) for link in self.links_of(node)]

    def find_link(self, a: str, b: str) -> Link:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise TopologyError(f"no link between {a} and {b}")

    def link_capacities_bps(self) -> dict[LinkId, float]:
        """Every link direction of the fabric (LinkId) with its rate in bit/s."""
        out: dict[LinkId, float] = {}
        for link in self.links:
            for node in (link.a, link.b):
                key = nic_link(node) if self.is_host(node) else egress_link(node, link.port_of(node))
                out[key] = link.capacity_mbps * 1e6
        return out

    def scaled(self, capacity_mbps: float) -> Topology:
        """This topology with every link at capacity_mbps (`--link-mbps`): the same experiment at a
        rate the data plane can keep faithful (a standard BMv2 build, see README)."""
        if not (isinstance(capacity_mbps, int | float) and math.isfinite(capacity_mbps) and capacity_mbps > 0):
            raise TopologyError(f"link rate must be a positive number of Mbit/s, got {capacity_mbps!r}")
        return Topology(self.name, list(self.switches), list(self.hosts),
                        [replace(link, capacity_mbps=capacity_mbps) for link in self.links],
                        {**self.defaults, "capacity_mbps": capacity_mbps}, list(self.servers))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "defaults": dict(self.defaults),
            "switches": [{"name": s.name, "role": s.role} for s in self.switches],
            "hosts": [{"name": h.name, **({"nics": h.nics} if h.nics != 1 else {})} for h in self.hosts],
            "links": [
                {
                    "a": link.a,
                    "b": link.b,
                    "a_port": link.a_port,
                    "b_port": link.b_port,
                    "capacity_mbps": link.capacity_mbps,
                    "queue_pkts": link.queue_pkts,
                }
                for link in self.links
            ],
            **({"servers": [{"name": sv.name, "gpus": list(sv.gpus), "nvlink_ratio": sv.nvlink_ratio}
                            for sv in self.servers]} if self.servers else {}),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def load_topology(path: Path | str) -> Topology:
    return parse_topology(read_file(path, TopologyError), source=str(path))


def parse_topology(text: str, source: str = "topology") -> Topology:
    """A topology from YAML text; TopologyError (naming the field) for anything invalid."""
    return topology_from_dict(parse_yaml(text, source, TopologyError), source=source)


def _name(fields: Fields, value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise fields.fail(where, f"invalid name {value!r} (lower-case letters, digits, '-' or '_', ending in a digit)")
    return value


def topology_from_dict(data: Any, source: str = "topology") -> Topology:
    fields = Fields(source, TopologyError)
    data = fields.mapping(data, "", {"name", "defaults", "switches", "hosts", "links", "servers"})
    name = fields.text(data.get("name", Path(source).stem), "name")
    defaults = fields.mapping(data.get("defaults", {}) or {}, "defaults", {"capacity_mbps", "queue_pkts",
                                                                           "nvlink_ratio"})
    default_capacity = float(fields.number(defaults.get("capacity_mbps", DEFAULT_CAPACITY_MBPS),
                                           "defaults.capacity_mbps", 0.001, MAX_CAPACITY_MBPS))
    default_queue = int(fields.number(defaults.get("queue_pkts", DEFAULT_QUEUE_PKTS), "defaults.queue_pkts", 1,
                                      MAX_QUEUE_PKTS, integer=True))
    seen: dict[str, str] = {}
    switches = _switches(fields, fields.items(data.get("switches", []), "switches"), seen)
    hosts = _hosts(fields, fields.items(data.get("hosts", []), "hosts"), seen)
    links = _links(fields, fields.items(data.get("links", []), "links"), seen, {h.name for h in hosts},
                   default_capacity, default_queue)
    default_ratio = float(fields.number(defaults.get("nvlink_ratio", DEFAULT_NVLINK_RATIO), "defaults.nvlink_ratio",
                                        0.001, MAX_NVLINK_RATIO))
    servers = _servers(fields, fields.items(data.get("servers", []) or [], "servers"), seen,
                       {h.name for h in hosts}, default_ratio)
    kept = {"capacity_mbps": default_capacity, "queue_pkts": default_queue}
    if "nvlink_ratio" in defaults:
        kept["nvlink_ratio"] = default_ratio
    topo = Topology(name, switches, hosts, links, kept, servers)
    for i, host in enumerate(hosts):
        count = len(topo.links_of(host.name))
        if count != host.nics:
            raise fields.fail(f"hosts[{i}]", f"host {host.name} has {count} links and {host.nics} "
                                             f"NIC{'s' if host.nics > 1 else ''} (nics: {host.nics}); one link per NIC")
    return topo


def _node_name(fields: Fields, raw: dict[str, Any], where: str, seen: dict[str, str]) -> str:
    name = _name(fields, raw.get("name"), f"{where}.name")
    if name in seen:
        raise fields.fail(f"{where}.name", f"duplicate node name {name!r} (also {seen[name]})")
    seen[name] = where
    return name


def _switches(fields: Fields, items: list[Any], seen: dict[str, str]) -> list[Switch]:
    switches = []
    for i, raw in enumerate(items):
        where = f"switches[{i}]"
        raw = fields.mapping(raw, where, {"name", "role"})
        name = _node_name(fields, raw, where, seen)
        role = raw.get("role", "switch")
        if role not in SWITCH_ROLES:
            raise fields.fail(f"{where}.role", f"unknown role {role!r} (one of {', '.join(SWITCH_ROLES)})")
        switches.append(Switch(name, role))
    if not switches:
        raise fields.fail("switches", "at least one switch is needed")
    return switches


def _hosts(fields: Fields, items: list[Any], seen: dict[str, str]) -> list[Host]:
    hosts = []
    for i, raw in enumerate(items):
        raw = fields.mapping(raw, f"hosts[{i}]", {"name", "nics"})
        name = _node_name(fields, raw, f"hosts[{i}]", seen)
        hosts.append(Host(name, int(fields.number(raw.get("nics", 1), f"hosts[{i}].nics", 1, 64, integer=True))))
    return hosts


def _servers(fields: Fields, items: list[Any], seen: dict[str, str], host_names: set[str],
             default_ratio: float) -> list[Server]:
    servers = []
    placed: dict[str, str] = {}
    for i, raw in enumerate(items):
        where = f"servers[{i}]"
        raw = fields.mapping(raw, where, {"name", "gpus", "nvlink_ratio"})
        name = _node_name(fields, raw, where, seen)
        gpus = fields.items(raw.get("gpus"), f"{where}.gpus")
        if not gpus:
            raise fields.fail(f"{where}.gpus", f"server {name} holds no GPU")
        for j, gpu in enumerate(gpus):
            if not isinstance(gpu, str) or gpu not in host_names:
                raise fields.fail(f"{where}.gpus[{j}]", f"unknown host {gpu!r} (a GPU is a host of the topology)")
            if gpu in placed:
                raise fields.fail(f"{where}.gpus[{j}]", f"GPU {gpu} is already in {placed[gpu]}")
            placed[gpu] = name
        ratio = float(fields.number(raw.get("nvlink_ratio", default_ratio), f"{where}.nvlink_ratio", 0.001,
                                    MAX_NVLINK_RATIO))
        servers.append(Server(name, tuple(gpus), ratio))
    return servers


def _links(fields: Fields, items: list[Any], seen: dict[str, str], host_names: set[str], default_capacity: float,
           default_queue: int) -> list[Link]:
    next_port: dict[str, int] = {}
    used_ports: dict[tuple[str, int], str] = {}
    links: list[Link] = []
    pairs: set[frozenset[str]] = set()
    for i, raw in enumerate(items):
        where = f"links[{i}]"
        raw = fields.mapping(raw, where, {"a", "b", "a_port", "b_port", "capacity_mbps", "queue_pkts"})
        ends = []
        for end in ("a", "b"):
            node = raw.get(end)
            if not isinstance(node, str) or node not in seen:
                raise fields.fail(f"{where}.{end}", f"unknown node {node!r}")
            ends.append(node)
        a, b = ends
        if a == b:
            raise fields.fail(f"{where}.b", f"a link cannot connect {a} to itself")
        if a in host_names and b in host_names:
            raise fields.fail(where, f"hosts {a} and {b} cannot be linked directly")
        if frozenset((a, b)) in pairs:
            raise fields.fail(where, f"duplicate link between {a} and {b}")
        pairs.add(frozenset((a, b)))
        ports: list[int] = []
        for end, node in (("a", a), ("b", b)):
            key = f"{end}_port"
            port = int(fields.number(raw[key], f"{where}.{key}", 1, MAX_PORT, integer=True)) if key in raw \
                else next_port.get(node, 0) + 1
            if port > MAX_PORT:
                raise fields.fail(f"{where}.{key}", f"port {port} exceeds {MAX_PORT}")
            if (node, port) in used_ports:
                raise fields.fail(f"{where}.{key}", f"port {port} of {node} already used by {used_ports[(node, port)]}")
            used_ports[(node, port)] = where
            next_port[node] = max(next_port.get(node, 0), port)
            ports.append(port)
        capacity = float(fields.number(raw.get("capacity_mbps", default_capacity), f"{where}.capacity_mbps", 0.001,
                                       MAX_CAPACITY_MBPS))
        queue = int(fields.number(raw.get("queue_pkts", default_queue), f"{where}.queue_pkts", 1, MAX_QUEUE_PKTS,
                                  integer=True))
        links.append(Link(a, b, ports[0], ports[1], capacity, queue))
    return links
