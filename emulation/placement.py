"""Where each node of a fabric runs when one machine is not enough (issue "Cluster mode"), from the CPU
model of emulation/budget.py (the measured cost of a frame-hop, of an idle switch, of a host and of
the controller).

Nodes go in groups that must share a machine: a switch with the hosts hanging off it (so only
switch-to-switch links cross machines, as tunnels), on multi-GPU servers a server's GPUs (their
NVLink is a bridge on one kernel), and every other switch alone. Groups are spread by longest
processing time first, each to the machine with the least load so far; the controller's share
starts on the first machine. A soft switch is one process whose forwarding holds one interpreter
lock: it cannot use more than SWITCH_CORE_LIMIT of a core however many a machine has, so a switch
that needs more cannot be emulated faithfully at that rate on any number of machines (`too_busy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from emulation import budget
from topologies.spec import Topology

SWITCH_CORE_LIMIT = 1.0


@dataclass
class Placement:
    machines: list[str]
    machine_of: dict[str, str] = field(default_factory=dict)  # node → machine
    cores: dict[str, float] = field(default_factory=dict)  # machine → the CPU its nodes need
    crossing: list[tuple[str, str]] = field(default_factory=list)  # links whose ends are on two machines
    switch_cores: dict[str, float] = field(default_factory=dict)  # switch → the CPU it needs
    tunnel_mbps: dict[str, float] = field(default_factory=dict)  # machine → the capacity of its crossing links

    @property
    def busiest(self) -> float:
        return max(self.cores.values(), default=0.0)

    @property
    def too_busy(self) -> dict[str, float]:
        """Switches needing more than one process can use (SWITCH_CORE_LIMIT)."""
        return {sw: c for sw, c in self.switch_cores.items() if c > SWITCH_CORE_LIMIT}


def groups(topo: Topology) -> list[list[str]]:
    """The nodes that share a machine: a server's GPUs; a switch and the single-NIC hosts on it;
    every other switch alone (see the module's doc)."""
    out = [list(server.gpus) for server in topo.servers]
    for sw in topo.switches:
        hosts = [n for n, _ in topo.neighbours(sw.name) if topo.is_host(n) and topo.server_of(n) is None]
        out.append([sw.name, *hosts])
    return out


def place(topo: Topology, machines: list[str], flows: list[tuple[str, str]]) -> Placement:
    """The fabric's nodes on `machines` for `flows` (source host, destination host; see budget.estimate)."""
    if not machines:
        raise ValueError("place: no machines")
    frames = budget.switch_frames(topo, flows)
    switch_cores = {sw: budget.IDLE_SWITCH_CORES + f * budget.HOP_CPU_US / 1e6 for sw, f in frames.items()}
    cost = {**switch_cores, **{h.name: budget.HOST_CORES for h in topo.hosts}}
    placement = Placement(list(machines), switch_cores=switch_cores)
    placement.cores = {m: 0.0 for m in machines}
    placement.cores[machines[0]] += budget.CONTROLLER_CORES
    for group in sorted(groups(topo), key=lambda g: (-sum(cost[n] for n in g), g[0])):
        machine = min(machines, key=lambda m: (placement.cores[m], machines.index(m)))
        placement.cores[machine] += sum(cost[n] for n in group)
        placement.machine_of.update({n: machine for n in group})
    for link in topo.links:
        a, b = placement.machine_of[link.a], placement.machine_of[link.b]
        if a != b:
            placement.crossing.append((link.a, link.b))
            for m in (a, b):
                placement.tunnel_mbps[m] = placement.tunnel_mbps.get(m, 0.0) + link.capacity_mbps
    return placement


def machines_needed(topo: Topology, flows: list[tuple[str, str]], cores_per_machine: float,
                    most: int = 4096) -> Placement | None:
    """The placement on the fewest machines of `cores_per_machine` (BUDGET_SHARE of them usable)
    whose every machine fits; None when no number does (a switch above SWITCH_CORE_LIMIT, or more
    than `most` machines)."""
    usable = budget.BUDGET_SHARE * cores_per_machine
    first = place(topo, ["m1"], flows)
    if first.too_busy:
        return None
    low = max(1, math.ceil(first.busiest / usable))  # no placement does better than perfect balance
    for count in range(low, most + 1):
        placement = first if count == 1 else place(topo, [f"m{i}" for i in range(1, count + 1)], flows)
        if placement.busiest <= usable:
            return placement
    return None
