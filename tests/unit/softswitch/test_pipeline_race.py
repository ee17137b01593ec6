"""Writes and forwarding on two threads, as the soft switch runs them (P4Runtime thread, data-plane
thread): no frame may leave by a route older than the last write acknowledged before it entered."""

from __future__ import annotations

import sys
import threading
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller import entities as ent
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from wire.p4info import P4Schema

SELECTOR = "StarIngress.ecmp_selector"
RUN_S = 0.5
PORTS = 500  # every write names a new port (1..500), so a route is known by its port


def port_of(seq: int) -> int:
    return seq % PORTS + 1


def member(schema: P4Schema, port: int):
    return ent.member(schema, SELECTOR, 1, ent.action(schema, "StarIngress.set_nhop", port=port,
                                                      smac="02:00:00:00:00:01", dmac="02:00:00:00:00:02"))


def test_no_frame_is_forwarded_by_a_route_older_than_the_last_acknowledged_write():
    schema = P4Schema.load()
    state = RuntimeState(schema)
    state.apply(ent.insert(member(schema, port_of(0))))
    state.apply(ent.insert(ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": ("10.0.9.0", 24)},
                                           member_id=1)))
    pipeline = Pipeline(state)
    frame = bytes(Ether(src="02:00:00:00:00:09", dst="02:00:00:00:00:01") /
                  IP(src="10.0.1.1", dst="10.0.9.9") / UDP(sport=1, dport=2) / (b"x" * 20))
    acked = [0]  # sequence number of the last write whose apply() returned
    stop = threading.Event()

    def writer() -> None:
        seq = 0
        while not stop.is_set():
            seq += 1
            state.apply(ent.modify(member(schema, port_of(seq))))
            acked[0] = seq

    stale: list[tuple[int, int, int]] = []
    forwarded = 0
    thread = threading.Thread(target=writer, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython can: inside the table walk too
    thread.start()
    deadline = time.monotonic() + RUN_S
    try:
        while time.monotonic() < deadline:
            before = acked[0]
            port, _ = pipeline.ingress(frame, 3)
            after = acked[0]
            forwarded += 1
            # The write after `after` may be inside apply(), its state already visible: newer is fine.
            allowed = {port_of(s) for s in range(before, after + 2)}
            if port not in allowed:
                stale.append((before, after, port))
    finally:
        stop.set()
        thread.join(5)
        sys.setswitchinterval(interval)
    assert forwarded > 100 and acked[0] > 100, (forwarded, acked[0])
    assert not stale, (f"{len(stale)} of {forwarded} frames left by a route older than the last acknowledged "
                       f"write (first: acked {stale[0][0]}..{stale[0][1]}, port {stale[0][2]})")
