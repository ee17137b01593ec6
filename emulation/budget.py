"""The CPU an experiment will need at its link rates, against what the machine has — said before it starts.

Model (calibrated from cpu.csv on this machine, 2026-12-05, README "Fidelity capacity"): a soft
switch spends IDLE_SWITCH_CORES with no traffic and ~30-60 µs of CPU per frame it forwards, less
the busier it is (the 8-rank ring over the four switches: 0.8-0.9 cores for ~13k frames/s at
10 Mbit/s, 1.0-1.1 for ~21k at 20, 1.2 for ~31k at 40); the pipeline itself is ~1.5 µs a frame —
the rest is wake-ups, system calls, GIL hand-offs and the receiver's kernel work that a veth send
carries. Flows send ACK_FRAMES_PER_DATA ACKs per data frame (measured there: 0.19); at the link
rate, where this model puts every flow, that is HOP_CPU_US per modelled frame-hop. Every host adds
HOST_CORES (its agent and its ranks) and the controller CONTROLLER_CORES (0.19-0.28 measured, most
of it INT reports). The load: each sending host at its NIC's rate
(split between its destinations, and no destination receiving more than its own NIC's rate), each
frame forwarded by every switch on its path. The budget is the machine's cores (BUDGET_SHARE of
them): the switches run at real-time priority and the rest of the testbed takes what they leave
before the machine's other work does. Over budget, the switches still get theirs first: at 40 and
80 Mbit/s the ring held 95-100% of its windows but its hosts, starved, reached only 73-75% and
52-55% of the link.

A full-load estimate for `make run` assumes every host sends to every other host (paths of the
fabric's mean length); a scenario or bench passes its own flows.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass

from topologies.spec import Topology

HOP_CPU_US = 40.0
IDLE_SWITCH_CORES = 0.03  # a soft switch with no traffic: link polls, probes, P4Runtime
ACK_FRAMES_PER_DATA = 0.2
FRAME_BYTES = 1514
HOST_CORES = 0.04
CONTROLLER_CORES = 0.25
BUDGET_SHARE = 1.0


@dataclass(frozen=True)
class Budget:
    """The CPU an experiment needs (cores) against the machine's budget; `fits_mbps`: the uniform
    link rate (Mbit/s) whose load fits, when the experiment's does not."""

    what: str
    link_mbps: float
    frames_per_s: float
    idle_cores: float  # the switches' without traffic
    other_cores: float
    cores: int

    @property
    def frame_cores(self) -> float:
        return self.frames_per_s * HOP_CPU_US / 1e6

    @property
    def switch_cores(self) -> float:
        return self.idle_cores + self.frame_cores

    @property
    def needed(self) -> float:
        return self.switch_cores + self.other_cores

    @property
    def available(self) -> float:
        return BUDGET_SHARE * self.cores

    @property
    def over(self) -> bool:
        return self.needed > self.available

    @property
    def fits_mbps(self) -> float:
        """The largest link rate (whole Mbit/s, scaling every link alike) whose load fits the budget."""
        room = self.available - self.other_cores - self.idle_cores
        if room <= 0 or self.frame_cores <= 0:
            return 0.0
        return float(max(1, math.floor(self.link_mbps * min(1.0, room / self.frame_cores))))

    def line(self) -> str:
        text = (f"CPU budget ({self.what}): ~{self.needed:.1f} of {self.cores} cores — switches "
                f"{self.switch_cores:.1f} ({self.frames_per_s / 1000:.0f}k frame-hops/s at ~{HOP_CPU_US:.0f} µs), "
                f"controller, agents and workloads {self.other_cores:.1f}")
        if self.over:
            text += (f"; OVER the {self.available:.1f} cores here: the switches (real-time) take theirs first, so "
                     f"expect the hosts to fall behind (busbw below the link), perhaps late windows; "
                     f"--link-mbps {self.fits_mbps:g} fits")
        return text


def _switch_graph(topo: Topology) -> dict[str, list[str]]:
    return {sw.name: [n for n, _ in topo.neighbours(sw.name) if topo.is_switch(n)] for sw in topo.switches}


def _shortest_counts(graph: dict[str, list[str]], start: str) -> tuple[dict[str, int], dict[str, int]]:
    """Breadth-first from start: each switch's distance and how many shortest paths reach it."""
    dist, count, frontier = {start: 0}, {start: 1}, [start]
    while frontier:
        nxt = []
        for node in frontier:
            for n in graph[node]:
                if n not in dist:
                    dist[n] = dist[node] + 1
                    count[n] = 0
                    nxt.append(n)
                if dist[n] == dist[node] + 1:
                    count[n] += count[node]
        frontier = nxt
    return dist, count


Searches = dict[str, tuple[dict[str, int], dict[str, int]]]  # start switch → its breadth-first search


def path_shares(topo: Topology, src: str, dst: str, _graph: dict[str, list[str]] | None = None,
                _searched: Searches | None = None) -> dict[str, float]:
    """The share of src → dst's frames each switch forwards, ECMP spreading them evenly over the
    shortest paths (their sum: the switches a frame crosses)."""
    graph = _graph or _switch_graph(topo)
    searched = {} if _searched is None else _searched
    start, goal = topo.host_link(src).other(src), topo.host_link(dst).other(dst)
    for node in (start, goal):
        if node not in searched:
            searched[node] = _shortest_counts(graph, node)
    (d_from, n_from), (d_to, n_to) = searched[start], searched[goal]
    if goal not in d_from:
        raise ValueError(f"no path between {src} and {dst}")
    total, length = n_from[goal], d_from[goal]
    return {node: n_from[node] * n_to[node] / total for node in d_from
            if node in d_to and d_from[node] + d_to[node] == length}


def switch_frames(topo: Topology, flows: list[tuple[str, str]]) -> dict[str, float]:
    """Frames per second each switch forwards (data and ACKs) for `flows` (source host, destination
    host), each source at its NIC's rate split between its flows, no destination taking more than
    its NIC's rate."""
    nic = {h.name: topo.host_link(h.name).capacity_mbps for h in topo.hosts}
    fan_out = Counter(src for src, _ in flows)
    fan_in = Counter(dst for _, dst in flows)
    graph, searched = _switch_graph(topo), Searches()
    frames: dict[str, float] = {sw.name: 0.0 for sw in topo.switches}
    for src, dst in flows:
        mbps = min(nic[src] / fan_out[src], nic[dst] / fan_in[dst])
        per_switch = mbps * 1e6 / 8 / FRAME_BYTES * (1 + ACK_FRAMES_PER_DATA)
        for node, share in path_shares(topo, src, dst, graph, searched).items():
            frames[node] += per_switch * share
    return frames


def path_switches(topo: Topology, src: str, dst: str) -> int:
    """Switches a frame from host src to host dst crosses (shortest path)."""
    return round(sum(path_shares(topo, src, dst).values()))


def estimate(topo: Topology, flows: list[tuple[str, str]], what: str, cores: int | None = None) -> Budget:
    """The budget of `flows` (source host, destination host), each source at its NIC's rate split
    between its flows, no destination taking more than its NIC's rate."""
    frames = sum(switch_frames(topo, flows).values())
    hosts = {h for flow in flows for h in flow}
    link_mbps = max((link.capacity_mbps for link in topo.links), default=0.0)
    return Budget(what, link_mbps, frames, len(topo.switches) * IDLE_SWITCH_CORES,
                  CONTROLLER_CORES + HOST_CORES * len(hosts), cores or os.cpu_count() or 1)


def full_load(topo: Topology, cores: int | None = None) -> Budget:
    """Every host sending at its NIC's rate, spread over every other host."""
    hosts = [h.name for h in topo.hosts]
    flows = [(a, b) for a in hosts for b in hosts if a != b]
    return estimate(topo, flows, "every host sending at its link rate", cores)


def ring_flows(hosts: list[str]) -> list[tuple[str, str]]:
    """A ring over `hosts` in that order: each sends to the next."""
    return [(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))] if len(hosts) > 1 else []


def ring(topo: Topology, hosts: list[str], cores: int | None = None) -> Budget:
    """A ring all-reduce over `hosts` in that order."""
    return estimate(topo, ring_flows(hosts), f"a {len(hosts)}-rank ring", cores)
