"""The switch program: topology → the P4Runtime updates that program one switch from scratch.

A pure function of the topology, its address plan and the switch's routes (controller/routing.py):
int_node (node id and the DSCP INT sources mark), the parser's value set of INT DSCPs, the INT report
clone session, int_source (when INT is on), int_sink on host-facing
ports, port_role and port_config per port, ECMP members and groups (every member watches its
port), then the ipv4_lpm routes that point at them. On a re-route (a link failed or came back),
route_updates writes only the route entries that changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller import entities as ent
from controller.routing import Route, port_configs
from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire.cpu import CPU_PORT, REPORT_SESSION, ROLE_HOST
from wire.intmd import DSCP_INT
from wire.p4info import P4Schema
from wire.proto import p4r

SELECTOR = "StarIngress.ecmp_selector"
INT_DSCP_SET = "StarParser.int_dscp"
INT_SAMPLE_LOG2 = 3  # default: INT on 1 in 8 packets of every host TCP/UDP flow


def switch_program(schema: P4Schema, topo: Topology, plan: AddressPlan, switch: str,
                   routes: list[Route], int_sample_log2: int | None = INT_SAMPLE_LOG2,
                   state: RouteState | None = None, *, int_dscp: int = DSCP_INT) -> list[p4r.Update]:
    """All updates that program `switch` from scratch, in dependency order; `state` (empty) is
    filled with what the route tables then hold (for route_updates on a re-route)."""
    updates: list[p4r.Update] = [
        ent.modify(ent.default_entry(schema, "StarEgress.int_node",
                                     ent.action(schema, "StarEgress.set_node_id", id=plan.switches[switch].device_id,
                                                dscp=int_dscp))),
        ent.modify(ent.value_set(schema, INT_DSCP_SET, [int_dscp])),
        ent.insert(ent.clone_session(REPORT_SESSION, CPU_PORT)),  # starnet.p4 truncates the reports
    ]
    if int_sample_log2 is not None:
        for proto in (6, 17):
            updates.append(ent.insert(ent.table_entry(
                schema, "StarIngress.int_source", {"hdr.ipv4.protocol": (proto, 0xFF)},
                action_call=ent.action(schema, "StarIngress.int_watch", sample_log2=int_sample_log2), priority=1)))
    for pc in port_configs(topo, switch):
        if pc.role == ROLE_HOST:
            updates.append(ent.insert(ent.table_entry(
                schema, "StarIngress.int_sink", {"standard_metadata.egress_spec": pc.port},
                action_call=ent.action(schema, "StarIngress.set_int_sink"))))
        updates.append(ent.insert(ent.table_entry(
            schema, "StarIngress.port_role", {"standard_metadata.ingress_port": pc.port},
            action_call=ent.action(schema, "StarIngress.set_port_role", role=pc.role))))
        updates.append(ent.insert(ent.table_entry(
            schema, "StarEgress.port_config", {"standard_metadata.egress_port": pc.port},
            action_call=ent.action(schema, "StarEgress.set_port_config",
                                   capacity_mbps=int(round(pc.capacity_mbps)),
                                   ecn_threshold_pkts=pc.ecn_threshold_pkts))))
    return updates + route_updates(schema, routes, RouteState() if state is None else state)


@dataclass
class RouteState:
    """What one switch's route tables hold, so a re-route writes only what changed: ECMP members
    (member id = egress port: one next hop per port), groups (by their ports, ids kept for the
    switch's life) and every routed prefix's target (("member" | "group", id))."""

    members: set[int] = field(default_factory=set)
    groups: dict[tuple[int, ...], int] = field(default_factory=dict)
    targets: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)


def route_updates(schema: P4Schema, routes: list[Route], state: RouteState) -> list[p4r.Update]:
    """The updates that take the switch's route tables from `state` to `routes` (and `state` with
    them): new members and groups first, then ipv4_lpm inserts and modifies, then deletes of
    prefixes no longer routed. From an empty state: the full program. Groups no route uses any more
    stay (a restored link uses them again)."""
    head: list[p4r.Update] = []
    tail: list[p4r.Update] = []
    wanted: dict[tuple[str, int], tuple[str, int]] = {}
    for route in routes:
        for hop in route.next_hops:
            if hop.port not in state.members:
                state.members.add(hop.port)
                head.append(ent.insert(ent.member(
                    schema, SELECTOR, hop.port,
                    ent.action(schema, "StarIngress.set_nhop", port=hop.port, smac=hop.smac, dmac=hop.dmac))))
        if len(route.next_hops) == 1:
            target = ("member", route.next_hops[0].port)
        else:
            ports = tuple(h.port for h in route.next_hops)
            if ports not in state.groups:
                state.groups[ports] = len(state.groups) + 1
                head.append(ent.insert(ent.group(schema, SELECTOR, state.groups[ports], [(p, p) for p in ports])))
            target = ("group", state.groups[ports])
        key = (route.prefix, route.prefix_len)
        wanted[key] = target
        before = state.targets.get(key)
        if before == target:
            continue
        entry = ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": key},
                                member_id=target[1] if target[0] == "member" else None,
                                group_id=target[1] if target[0] == "group" else None)
        tail.append(ent.insert(entry) if before is None else ent.modify(entry))
    for key in state.targets:
        if key not in wanted:
            tail.append(ent.delete(ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": key})))
    state.targets = wanted
    return head + tail
