"""ECMP collisions made on purpose: which uplink a switch's hash gives a flow, and source ports for
two flows that it puts on the same one (the tests and benches of mode paths start with them)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from controller.program import switch_program
from controller.routing import compute_routes
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire.p4info import P4Schema


def _hasher(topo: Topology, src: str) -> Callable[[str, int, int, int], int]:
    """(dst, sport, dport, proto) → the port src's leaf sends that flow out of, by its ECMP hash (the
    soft switch's program for that leaf, built once and run here; no pin)."""
    plan = AddressPlan(topo)
    leaf = plan.hosts[src].switch
    state = RuntimeState(P4Schema.load())
    for update in switch_program(state.schema, topo, plan, leaf, compute_routes(topo, plan)[leaf]):
        state.apply(update)
    pipeline = Pipeline(state)

    def uplink(dst: str, sport: int, dport: int, proto: int) -> int:
        addrs = bytes(map(int, f"{plan.hosts[src].ip}.{plan.hosts[dst].ip}".split(".")))
        return pipeline.walk_tables(plan.hosts[src].switch_port, proto, addrs, struct.pack("!HH", sport, dport))[0]
    return uplink


def ecmp_uplink(topo: Topology, src: str, dst: str, sport: int, dport: int, proto: int = 6) -> int:
    """The port the source's leaf sends this flow out of, by its ECMP hash."""
    return _hasher(topo, src)(dst, sport, dport, proto)


def colliding_ports(topo: Topology, a: tuple[str, str], b: tuple[str, str], base: int,
                    dport: int = 5201) -> tuple[int, int]:
    """Source ports for flows a and b (src, dst; both to `dport`) that ECMP puts on one uplink."""
    uplink = ecmp_uplink(topo, *a, base, dport)
    of_b = _hasher(topo, b[0])
    for sport in range(base + 1, base + 500):
        if of_b(b[1], sport, dport, 6) == uplink:
            return base, sport
    raise ValueError(f"no source port in {base + 1}..{base + 499} collides with {a} at {uplink}")
