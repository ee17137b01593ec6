"""Topology spec: switches, hosts and links with capacity (Mbps) and queue depth (packets).

YAML form::

    name: my-fabric
    defaults: {capacity_mbps: 20, queue_pkts: 64}
    switches: [{name: s1, role: spine}, {name: s3, role: leaf}]
    hosts: [{name: h1}]
    links: [{a: h1, b: s3}, {a: s3, b: s1, capacity_mbps: 40}]

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

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*[0-9]+$")
MAX_PORT = CPU_PORT - 1  # topology ports are 1..254, below the CPU port
SWITCH_ROLES = ("spine", "leaf", "core", "agg", "edge", "switch")
DEFAULT_CAPACITY_MBPS = 20.0
DEFAULT_QUEUE_PKTS = 64
MAX_CAPACITY_MBPS = 100_000.0  # 100 Gbit/s: far past what an emulated link carries
MAX_QUEUE_PKTS = (1 << 19) - 1  # v1model's enq_qdepth and starnet.p4's ECN threshold are 19 bits


class TopologyError(ValueError):
    """A topology spec is invalid; the message starts with the field path."""


@dataclass(frozen=True)
class Switch:
    name: str
    role: str = "switch"


@dataclass(frozen=True)
class Host:
    name: str


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

    def __post_init__(self) -> None:
        self._switch_names = {s.name for s in self.switches}
        self._host_names = {h.name for h in self.hosts}

    def is_switch(self, name: str) -> bool:
        return name in self._switch_names

    def is_host(self, name: str) -> bool:
        return name in self._host_names

    def links_of(self, node: str) -> list[Link]:
        return [link for link in self.links if node in (link.a, link.b)]

    def host_link(self, host: str) -> Link:
        links = self.links_of(host)
        if len(links) != 1:
            raise TopologyError(f"host {host} has {len(links)} links; exactly one is supported")
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
                        {**self.defaults, "capacity_mbps": capacity_mbps})

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "defaults": dict(self.defaults),
            "switches": [{"name": s.name, "role": s.role} for s in self.switches],
            "hosts": [{"name": h.name} for h in self.hosts],
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
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def load_topology(path: Path | str) -> Topology:
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise TopologyError(f"{path}: not UTF-8 text: {exc}") from None
    return parse_topology(text, source=str(path))


def parse_topology(text: str, source: str = "topology") -> Topology:
    """A topology from YAML text; TopologyError (naming the field) for anything invalid."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"{source}: not valid YAML: {exc}") from None
    except RecursionError:
        raise TopologyError(f"{source}: not valid YAML: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - PyYAML's constructors: `!!float x` ValueError, `!!timestamp x` AttributeError
        raise TopologyError(f"{source}: not valid YAML: {type(exc).__name__}: {exc}") from None
    return topology_from_dict(data, source=source)


def _number(value: Any, where: str, *, integer: bool, minimum: float, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TopologyError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise TopologyError(f"{where}: expected a finite number, got {value!r}")
    if integer and not float(value).is_integer():
        raise TopologyError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise TopologyError(f"{where}: must be >= {minimum}, got {value!r}")
    if value > maximum:
        raise TopologyError(f"{where}: must be <= {maximum}, got {value!r}")
    return int(value) if integer else float(value)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise TopologyError(
            f"{where}: invalid name {value!r} (lower-case letters, digits, '-' or '_', ending in a digit)"
        )
    return value


def _mapping(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TopologyError(f"{where}: expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise TopologyError(f"{where}.{key}: unknown field (allowed: {', '.join(sorted(allowed))})")
    return value


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise TopologyError(f"{key}: expected a list, got {type(value).__name__}")
    return value


def topology_from_dict(data: Any, source: str = "topology") -> Topology:
    data = _mapping(data, source, {"name", "defaults", "switches", "hosts", "links"})
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise TopologyError("name: expected a non-empty string")
    defaults = _mapping(data.get("defaults", {}) or {}, "defaults", {"capacity_mbps", "queue_pkts"})
    default_capacity = _number(
        defaults.get("capacity_mbps", DEFAULT_CAPACITY_MBPS), "defaults.capacity_mbps",
        integer=False, minimum=0.001, maximum=MAX_CAPACITY_MBPS,
    )
    default_queue = _number(
        defaults.get("queue_pkts", DEFAULT_QUEUE_PKTS), "defaults.queue_pkts", integer=True, minimum=1,
        maximum=MAX_QUEUE_PKTS,
    )

    seen: dict[str, str] = {}
    switches: list[Switch] = []
    for i, raw in enumerate(_list(data, "switches")):
        where = f"switches[{i}]"
        raw = _mapping(raw, where, {"name", "role"})
        sw_name = _name(raw.get("name"), f"{where}.name")
        if sw_name in seen:
            raise TopologyError(f"{where}.name: duplicate node name {sw_name!r} (also {seen[sw_name]})")
        role = raw.get("role", "switch")
        if role not in SWITCH_ROLES:
            raise TopologyError(f"{where}.role: unknown role {role!r} (one of {', '.join(SWITCH_ROLES)})")
        seen[sw_name] = where
        switches.append(Switch(sw_name, role))
    if not switches:
        raise TopologyError("switches: at least one switch is needed")

    hosts: list[Host] = []
    for i, raw in enumerate(_list(data, "hosts")):
        where = f"hosts[{i}]"
        raw = _mapping(raw, where, {"name"})
        host_name = _name(raw.get("name"), f"{where}.name")
        if host_name in seen:
            raise TopologyError(f"{where}.name: duplicate node name {host_name!r} (also {seen[host_name]})")
        seen[host_name] = where
        hosts.append(Host(host_name))

    next_port: dict[str, int] = {}
    used_ports: dict[tuple[str, int], str] = {}
    links: list[Link] = []
    pairs: set[frozenset[str]] = set()
    host_names = {h.name for h in hosts}
    for i, raw in enumerate(_list(data, "links")):
        where = f"links[{i}]"
        raw = _mapping(raw, where, {"a", "b", "a_port", "b_port", "capacity_mbps", "queue_pkts"})
        ends = []
        for end in ("a", "b"):
            node = raw.get(end)
            if not isinstance(node, str) or node not in seen:
                raise TopologyError(f"{where}.{end}: unknown node {node!r}")
            ends.append(node)
        a, b = ends
        if a == b:
            raise TopologyError(f"{where}.b: a link cannot connect {a} to itself")
        if a in host_names and b in host_names:
            raise TopologyError(f"{where}: hosts {a} and {b} cannot be linked directly")
        pair = frozenset((a, b))
        if pair in pairs:
            raise TopologyError(f"{where}: duplicate link between {a} and {b}")
        pairs.add(pair)
        ports: list[int] = []
        for end, node in (("a", a), ("b", b)):
            key = f"{end}_port"
            if key in raw:
                port = int(_number(raw[key], f"{where}.{key}", integer=True, minimum=1, maximum=MAX_PORT))
            else:
                port = next_port.get(node, 0) + 1
            if port > MAX_PORT:
                raise TopologyError(f"{where}.{key}: port {port} exceeds {MAX_PORT}")
            if (node, port) in used_ports:
                raise TopologyError(f"{where}.{key}: port {port} of {node} already used by {used_ports[(node, port)]}")
            used_ports[(node, port)] = where
            next_port[node] = max(next_port.get(node, 0), port)
            ports.append(port)
        capacity = _number(
            raw.get("capacity_mbps", default_capacity), f"{where}.capacity_mbps", integer=False, minimum=0.001,
            maximum=MAX_CAPACITY_MBPS,
        )
        queue = int(_number(raw.get("queue_pkts", default_queue), f"{where}.queue_pkts", integer=True, minimum=1,
                            maximum=MAX_QUEUE_PKTS))
        links.append(Link(a, b, ports[0], ports[1], capacity, queue))

    topo = Topology(
        name, switches, hosts, links, {"capacity_mbps": default_capacity, "queue_pkts": default_queue}
    )
    for i, host in enumerate(hosts):
        count = len(topo.links_of(host.name))
        if count != 1:
            raise TopologyError(f"hosts[{i}]: host {host.name} has {count} links; exactly one is needed")
    return topo
