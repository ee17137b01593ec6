"""The switch program: topology → the P4Runtime updates that program one switch from scratch.

A pure function of the topology, its address plan and the switch's routes (controller/routing.py):
int_node, the INT report clone session, int_source (when INT is on), int_sink on host-facing
ports, port_role and port_config per port, ECMP members and groups (every member watches its
port), then the ipv4_lpm routes that point at them.
"""

from __future__ import annotations

from controller import entities as ent
from controller.routing import NextHop, Route, port_configs
from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire.cpu import CPU_PORT, REPORT_SESSION, ROLE_HOST
from wire.p4info import P4Schema
from wire.proto import p4r

SELECTOR = "StarIngress.ecmp_selector"
INT_SAMPLE_LOG2 = 3  # default: INT on 1 in 8 packets of every host TCP/UDP flow


def switch_program(schema: P4Schema, topo: Topology, plan: AddressPlan, switch: str,
                   routes: list[Route], int_sample_log2: int | None = INT_SAMPLE_LOG2) -> list[p4r.Update]:
    """All updates that program `switch` from scratch, in dependency order."""
    updates: list[p4r.Update] = [
        ent.modify(ent.default_entry(schema, "StarEgress.int_node",
                                     ent.action(schema, "StarEgress.set_node_id", id=plan.switches[switch].device_id))),
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
    members: dict[NextHop, int] = {}
    groups: dict[tuple[NextHop, ...], int] = {}
    tail: list[p4r.Update] = []
    for route in routes:
        for hop in route.next_hops:
            if hop not in members:
                members[hop] = len(members) + 1
                updates.append(ent.insert(ent.member(
                    schema, SELECTOR, members[hop],
                    ent.action(schema, "StarIngress.set_nhop", port=hop.port, smac=hop.smac, dmac=hop.dmac))))
        match = {"hdr.ipv4.dst_addr": (route.prefix, route.prefix_len)}
        if len(route.next_hops) == 1:
            tail.append(ent.insert(ent.table_entry(schema, "StarIngress.ipv4_lpm", match,
                                                   member_id=members[route.next_hops[0]])))
            continue
        if route.next_hops not in groups:
            groups[route.next_hops] = len(groups) + 1
            updates.append(ent.insert(ent.group(
                schema, SELECTOR, groups[route.next_hops],
                [(members[h], h.port) for h in route.next_hops])))
        tail.append(ent.insert(ent.table_entry(schema, "StarIngress.ipv4_lpm", match,
                                               group_id=groups[route.next_hops])))
    return updates + tail
