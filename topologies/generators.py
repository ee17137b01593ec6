"""Topology generators: leaf-spine, fat-tree(k), dumbbell(n), rail-optimized multi-GPU servers;
and lookup by name.

Names accepted by ``topology_by_name``: ``leafspine`` (2 spines, 2 leaves, 4 hosts per leaf),
``leafspine:S,L,H``, ``fattree`` (k=4), ``fattree:K``, ``dumbbell`` (n=2), ``dumbbell:N``,
``railopt`` (2 servers of 4 GPUs, 2 spines, NVLink 8x the NIC), ``railopt:SERVERS,GPUS,SPINES[,RATIO]``,
or a path to a YAML file. Arguments may be named (``railopt:servers=4,gpus=4``, ``fattree:k=4``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from topologies.spec import (
    DEFAULT_CAPACITY_MBPS,
    DEFAULT_NVLINK_RATIO,
    DEFAULT_QUEUE_PKTS,
    Topology,
    TopologyError,
    load_topology,
    topology_from_dict,
)


def _build(name: str, switches: list[tuple[str, str]], hosts: list[str], links: list[tuple[str, str]],
           capacity_mbps: float, queue_pkts: int, servers: list[dict[str, Any]] | None = None) -> Topology:
    data: dict[str, Any] = {
        "name": name,
        "defaults": {"capacity_mbps": capacity_mbps, "queue_pkts": queue_pkts},
        "switches": [{"name": n, "role": r} for n, r in switches],
        "hosts": [{"name": h} for h in hosts],
        "links": [{"a": a, "b": b} for a, b in links],
        **({"servers": servers} if servers else {}),
    }
    return topology_from_dict(data, source=name)


def leafspine(spines: int = 2, leaves: int = 2, hosts_per_leaf: int = 4,
              capacity_mbps: float = DEFAULT_CAPACITY_MBPS, queue_pkts: int = DEFAULT_QUEUE_PKTS) -> Topology:
    """Spines s1..sS, leaves s(S+1)..; every leaf links to every spine; hosts h1.. under the leaves."""
    if spines < 1 or leaves < 1 or hosts_per_leaf < 1:
        raise TopologyError("leafspine: spines, leaves and hosts_per_leaf must be >= 1")
    spine_names = [f"s{i + 1}" for i in range(spines)]
    leaf_names = [f"s{spines + i + 1}" for i in range(leaves)]
    hosts, links = [], []
    for li, leaf in enumerate(leaf_names):
        for k in range(hosts_per_leaf):
            host = f"h{li * hosts_per_leaf + k + 1}"
            hosts.append(host)
            links.append((host, leaf))
    for leaf in leaf_names:
        for spine in spine_names:
            links.append((leaf, spine))
    switches = [(s, "spine") for s in spine_names] + [(s, "leaf") for s in leaf_names]
    return _build(f"leafspine-{spines}x{leaves}x{hosts_per_leaf}", switches, hosts, links,
                  capacity_mbps, queue_pkts)


def fattree(k: int = 4, capacity_mbps: float = DEFAULT_CAPACITY_MBPS,
            queue_pkts: int = DEFAULT_QUEUE_PKTS) -> Topology:
    """Three-tier fat-tree: (k/2)^2 core, k pods of k/2 agg + k/2 edge, k/2 hosts per edge."""
    if k < 2 or k % 2:
        raise TopologyError(f"fattree: k must be an even number >= 2, got {k}")
    half = k // 2
    n = 0

    def next_switch() -> str:
        nonlocal n
        n += 1
        return f"s{n}"

    cores = [next_switch() for _ in range(half * half)]
    switches = [(c, "core") for c in cores]
    hosts: list[str] = []
    links: list[tuple[str, str]] = []
    edge_links: list[tuple[str, str]] = []
    up_links: list[tuple[str, str]] = []
    for _pod in range(k):
        aggs = [next_switch() for _ in range(half)]
        edges = [next_switch() for _ in range(half)]
        switches += [(a, "agg") for a in aggs] + [(e, "edge") for e in edges]
        for edge in edges:
            for _ in range(half):
                host = f"h{len(hosts) + 1}"
                hosts.append(host)
                edge_links.append((host, edge))
            for agg in aggs:
                up_links.append((edge, agg))
        for ai, agg in enumerate(aggs):
            for ci in range(half):
                up_links.append((agg, cores[ai * half + ci]))
    links = edge_links + up_links
    return _build(f"fattree-{k}", switches, hosts, links, capacity_mbps, queue_pkts)


def dumbbell(n: int = 2, capacity_mbps: float = DEFAULT_CAPACITY_MBPS,
             queue_pkts: int = DEFAULT_QUEUE_PKTS) -> Topology:
    """Two switches s1-s2 joined by one bottleneck link; n hosts on each side."""
    if n < 1:
        raise TopologyError(f"dumbbell: n must be >= 1, got {n}")
    hosts = [f"h{i + 1}" for i in range(2 * n)]
    links = [(h, "s1") for h in hosts[:n]] + [(h, "s2") for h in hosts[n:]] + [("s1", "s2")]
    return _build(f"dumbbell-{n}", [("s1", "leaf"), ("s2", "leaf")], hosts, links, capacity_mbps, queue_pkts)


def star(hosts: int = 16, capacity_mbps: float = DEFAULT_CAPACITY_MBPS,
         queue_pkts: int = DEFAULT_QUEUE_PKTS) -> Topology:
    """One switch s1 with hosts h1..hN: a non-blocking switch, where only the NICs limit (the
    reference Hedera and Mininet-HiFi measure a fat-tree's patterns against)."""
    if hosts < 1:
        raise TopologyError(f"star: hosts must be >= 1, got {hosts}")
    names = [f"h{i + 1}" for i in range(hosts)]
    return _build(f"star-{hosts}", [("s1", "leaf")], names, [(h, "s1") for h in names], capacity_mbps, queue_pkts)


def railopt(servers: int = 2, gpus: int = 4, spines: int = 2, nvlink_ratio: float = DEFAULT_NVLINK_RATIO,
            capacity_mbps: float = DEFAULT_CAPACITY_MBPS, queue_pkts: int = DEFAULT_QUEUE_PKTS) -> Topology:
    """Rail-optimized multi-GPU servers (NVIDIA's rail-optimized SuperPOD, Alibaba HPN): spines
    s1..sS; one leaf per rail, s(S+1)..s(S+G), rail r joining GPU r of every server; server srvK
    holds GPUs h((K-1)G+1)..h(KG), each a host with its own NIC on its rail's leaf, joined to the
    server's other GPUs by NVLink at `nvlink_ratio` times the NIC rate. Traffic between GPUs of one
    rank stays under one leaf; between rails it crosses a spine (or, once relayed, NVLink)."""
    if servers < 1 or gpus < 1 or spines < 1:
        raise TopologyError("railopt: servers, gpus and spines must be >= 1")
    spine_names = [f"s{i + 1}" for i in range(spines)]
    rails = [f"s{spines + r + 1}" for r in range(gpus)]
    hosts: list[str] = []
    links: list[tuple[str, str]] = []
    server_list: list[dict[str, Any]] = []
    for k in range(servers):
        members = [f"h{k * gpus + r + 1}" for r in range(gpus)]
        hosts += members
        server_list.append({"name": f"srv{k + 1}", "gpus": members, "nvlink_ratio": float(nvlink_ratio)})
    for r, leaf in enumerate(rails):  # a leaf's ports: its rail's GPUs in server order, then the spines
        links += [(f"h{k * gpus + r + 1}", leaf) for k in range(servers)]
    links += [(leaf, spine) for leaf in rails for spine in spine_names]
    switches = [(s, "spine") for s in spine_names] + [(leaf, "leaf") for leaf in rails]
    return _build(f"railopt-{servers}x{gpus}x{spines}", switches, hosts, links, capacity_mbps, queue_pkts,
                  server_list)


GENERATORS: dict[str, Callable[..., Topology]] = {"leafspine": leafspine, "fattree": fattree, "dumbbell": dumbbell,
                                                  "star": star, "railopt": railopt}


def topology_by_name(spec: str) -> Topology:
    """A generator name with optional integer arguments (``fattree:4``) or a YAML file path."""
    base, _, args = spec.partition(":")
    if base in GENERATORS:
        generator = GENERATORS[base]
        names = list(inspect.signature(generator).parameters)
        positional: list[float] = []
        named: dict[str, float] = {}
        for arg in (a.strip() for a in args.split(",") if a.strip()):
            key, _, value = arg.rpartition("=")
            if key and key not in names:
                raise TopologyError(f"topology {spec!r}: {base} has no parameter {key!r} ({', '.join(names)})")
            if not key and named:
                raise TopologyError(f"topology {spec!r}: a positional argument after a named one")
            try:
                number = float(value) if "." in value else int(value)
            except ValueError:
                raise TopologyError(f"topology {spec!r}: {arg!r} is not a number") from None
            if key:
                named[key] = number
            else:
                positional.append(number)
        if len(positional) > len(names):
            raise TopologyError(f"topology {spec!r}: {base} takes at most {len(names)} arguments ({', '.join(names)})")
        try:
            return generator(*positional, **named)
        except TypeError as exc:  # the same parameter given twice
            raise TopologyError(f"topology {spec!r}: {exc}") from None
    path = Path(spec)
    if path.exists():
        return load_topology(path)
    raise TopologyError(f"unknown topology {spec!r}: not one of {', '.join(GENERATORS)} and no such file")
