"""ECMP collisions made on purpose: which uplink a switch's hash gives a flow, and source ports for
two flows that it puts on the same one (the tests and benches of mode paths start with them)."""

from __future__ import annotations

import struct

from controller.program import switch_program
from controller.routing import compute_routes
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire.p4info import P4Schema


def ecmp_uplink(topo: Topology, src: str, dst: str, sport: int, dport: int, proto: int = 6) -> int:
    """The port the source's leaf sends this flow out of, by its ECMP hash (the soft switch's program
    for that leaf, run here; no pin)."""
    plan = AddressPlan(topo)
    leaf = plan.hosts[src].switch
    state = RuntimeState(P4Schema.load())
    for update in switch_program(state.schema, topo, plan, leaf, compute_routes(topo, plan)[leaf]):
        state.apply(update)
    addrs = bytes(map(int, f"{plan.hosts[src].ip}.{plan.hosts[dst].ip}".split(".")))
    return Pipeline(state).walk_tables(plan.hosts[src].switch_port, proto, addrs, struct.pack("!HH", sport, dport))[0]


def colliding_ports(topo: Topology, a: tuple[str, str], b: tuple[str, str], base: int,
                    dport: int = 5201) -> tuple[int, int]:
    """Source ports for flows a and b (src, dst; both to `dport`) that ECMP puts on one uplink."""
    uplink = ecmp_uplink(topo, *a, base, dport)
    for sport in range(base + 1, base + 500):
        if ecmp_uplink(topo, *b, sport, dport) == uplink:
            return base, sport
    raise ValueError(f"no source port in {base + 1}..{base + 499} collides with {a} at {uplink}")
