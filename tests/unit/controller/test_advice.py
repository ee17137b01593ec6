"""The advice loop's demands: a flow whose reported packets are pure ACKs (the reverse direction of a
TCP transfer) is no demand, so it does not halve its host's NIC for the host's own transfer."""

from __future__ import annotations

import time

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from controller.advice import AdviceLoop
from controller.telemetry import Collector
from tests.unit.controller.test_telemetry import ack_report, hop, report
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire.intmd import DSCP_INT, Hop, IntStack


def leafspine_loop(tmp_path) -> tuple[dict[str, int], Collector, AdviceLoop]:
    """The default leaf-spine's advice loop in mode advice: its spine s1's and leaves' INT ids, collector, loop."""
    topo = leafspine()
    plan = AddressPlan(topo)
    ids = {name: plan.switches[name].device_id for name in ("s1", "s3", "s4")}
    collector = Collector({i: n for n, i in ids.items()})
    return ids, collector, AdviceLoop(topo, plan, collector, tmp_path, "advice")


def test_only_flows_that_carry_data_are_demands(tmp_path):
    ids, collector, loop = leafspine_loop(tmp_path)
    try:
        now = time.monotonic()
        # h1 → h5 with data (full segments); h5 → h1 only ACKs (reports list hops newest first)
        collector.feed(report([hop(ids["s4"], 1, 0, 10), hop(ids["s1"], 2, 0, 10), hop(ids["s3"], 5, 0, 10)],
                              payload=FULL), now=now)
        collector.feed(ack_report([hop(ids["s3"], 1, 0, 10), hop(ids["s1"], 1, 0, 10), hop(ids["s4"], 5, 0, 10)]),
                       now=now)
        demands = loop.demands(now, collector.snapshot())
        assert [(d.src, d.dst) for d in demands] == [("10.0.3.1", "10.0.4.1")]
        advice = loop.step(now)
        assert advice == {("10.0.3.1", "10.0.4.1"): 20e6}  # alone on its links: eta_alone, its line rate (unpaced)
    finally:
        loop.close()


FULL = bytes(1448)  # a full segment (MSS at MTU 1500): a transfer's


def test_small_messages_are_no_demand_until_a_full_segment_or_a_transfers_rate(tmp_path):
    """A barrier or a notification between many pairs: before, each was a demand at its NIC's rate
    for a few report gaps, and halved a ring's transfer into the same host for ~0.2 s."""
    ids, collector, loop = leafspine_loop(tmp_path)
    to_h5 = [hop(ids["s4"], 1, 0, 10), hop(ids["s1"], 2, 0, 10), hop(ids["s3"], 5, 0, 10)]
    h1, h5 = "10.0.3.1", "10.0.4.1"
    try:
        now = time.monotonic()
        collector.feed(tcp_report(h1, h5, to_h5, 64), now=now)
        collector.feed(tcp_report(h1, h5, to_h5, 999), now=now + 0.001)
        assert loop.demands(now + 0.002, collector.snapshot()) == []
        assert loop.active_flows(now + 0.002, collector.snapshot()) == []  # nor placed (mode paths)
        collector.feed(tcp_report(h1, h5, to_h5, 1000), now=now + 0.003)  # one full segment: a transfer's
        assert [(d.src, d.dst) for d in loop.demands(now + 0.004, collector.snapshot())] == [(h1, h5)]
    finally:
        loop.close()


def tcp_report(src: str, dst: str, hops: list[Hop], payload_len: int, sport: int = 40000) -> bytes:
    stack = IntStack(orig_dscp=0, remaining_hop_cnt=6 - len(hops), hops=hops)
    return bytes(Ether() / IP(src=src, dst=dst, tos=DSCP_INT << 2) / TCP(sport=sport, dport=29500, flags="PA")
                 / (stack.pack() + bytes(payload_len)))


def test_a_connections_notifications_are_chatter_and_the_nic_is_the_transfers(tmp_path):
    # Gloo's ring: h1 sends h5 the data and h2 (its other neighbour) a few bytes per segment.
    ids, collector, loop = leafspine_loop(tmp_path)
    to_h5 = [hop(ids["s4"], 1, 0, 10), hop(ids["s1"], 2, 0, 10), hop(ids["s3"], 5, 0, 10)]
    to_h2 = [hop(ids["s3"], 2, 0, 10)]
    h1, h2, h5 = "10.0.3.1", "10.0.3.2", "10.0.4.1"
    try:
        t = time.monotonic()
        for i in range(40):  # 0.4 s: h1 → h5 reported every 10 ms, full segments; h1 → h2 every 100 ms, 16 B
            collector.feed(tcp_report(h1, h5, to_h5, 1448), now=t + i * 0.01)
            if i % 10 == 0:
                collector.feed(tcp_report(h1, h2, to_h2, 16, sport=41000), now=t + i * 0.01)
            if i == 5:  # not measured yet, but its 16 B are no transfer's segment: no demand, the NIC is h5's
                assert loop.step(t + i * 0.01) == {(h1, h5): pytest.approx(20e6)}
        loop.step(t + 0.4)
        assert loop.sent == {(h1, h5): pytest.approx(20e6)}
        assert (h1, h2, 6, 41000, 29500) in loop.chatter and (h1, h5, 6, 40000, 29500) in loop.transfers
        assert [f for f in loop.active_flows(t + 0.4, collector.snapshot()) if f[1] == h2] == []  # never placed
        for i in range(40, 70):  # the connection turns into a transfer: a demand once measured
            collector.feed(tcp_report(h1, h5, to_h5, 1448), now=t + i * 0.01)
            collector.feed(tcp_report(h1, h2, to_h2, 1448, sport=41000), now=t + i * 0.01)
        assert loop.step(t + 0.7) == {(h1, h5): pytest.approx(9.5e6), (h1, h2): pytest.approx(9.5e6)}
        # a transfer slowed to 1% of its NIC stays one (hysteresis down to 0.5%) ...
        for i in range(70, 100):
            collector.feed(tcp_report(h1, h5, to_h5, 1448), now=t + i * 0.01)
            if i % 10 == 0:
                collector.feed(tcp_report(h1, h2, to_h2, 300, sport=41000), now=t + i * 0.01)
        loop.step(t + 1.0)
        assert (h1, h2, 6, 41000, 29500) in loop.transfers  # 300 B per 100 ms × 8 = 192 kbit/s ≥ 0.5%
    finally:
        loop.close()


def test_a_reply_is_a_demand_briefly_a_transfer_for_a_few_report_gaps_at_its_advice(tmp_path):
    ids, collector, loop = leafspine_loop(tmp_path)
    try:
        now = time.monotonic()
        for i in range(3):  # h1 → h5: a transfer, three reports with data
            collector.feed(report([hop(ids["s4"], 1, i, 10 + i), hop(ids["s1"], 2, i, 10 + i),
                                   hop(ids["s3"], 5, i, 10 + i)], payload=FULL), now=now)
        # h5 → h1: one report with data (the receiver's reply): a few bytes are no demand ...
        back = [hop(ids["s3"], 1, 0, 10), hop(ids["s1"], 1, 0, 10), hop(ids["s4"], 5, 0, 10)]
        collector.feed(ack_report(back, payload=b"done"), now=now)
        assert {(d.src, d.dst) for d in loop.demands(now, collector.snapshot())} == {("10.0.3.1", "10.0.4.1")}
        collector.feed(ack_report(back, payload=FULL), now=now)  # ... a reply of a full segment is, briefly
        pairs = {(d.src, d.dst) for d in loop.demands(now, collector.snapshot())}
        assert pairs == {("10.0.3.1", "10.0.4.1"), ("10.0.4.1", "10.0.3.1")}
        assert loop.mouse_timeout_s["10.0.4.1"] == pytest.approx(0.2)  # 20 Mbit/s: 4 report gaps are 19 ms
        assert {(d.src, d.dst) for d in loop.demands(now + 0.1, collector.snapshot())} == pairs
        # the transfer, unadvised (its NIC's 20 Mbit/s): 12 gaps of 8 frames are 58 ms, the floor 0.2 s
        assert not {(d.src, d.dst) for d in loop.demands(now + 0.25, collector.snapshot())}
        loop.sent[("10.0.3.1", "10.0.4.1")] = 2e6  # advised 2 Mbit/s: 12 gaps are 0.58 s
        assert {(d.src, d.dst) for d in loop.demands(now + 0.55, collector.snapshot())} == {("10.0.3.1", "10.0.4.1")}
        assert not {(d.src, d.dst) for d in loop.demands(now + 0.62, collector.snapshot())}
        loop.sent[("10.0.3.1", "10.0.4.1")] = 10e3  # never longer than FLOW_TIMEOUT_S
        assert {(d.src, d.dst) for d in loop.demands(now + 0.95, collector.snapshot())} == {("10.0.3.1", "10.0.4.1")}
        assert not {(d.src, d.dst) for d in loop.demands(now + 1.1, collector.snapshot())}
    finally:
        loop.close()


def test_on_a_slow_nic_a_new_flow_keeps_its_share_until_its_next_reports_come(tmp_path):
    topo = leafspine(capacity_mbps=1)
    loop = AdviceLoop(topo, AddressPlan(topo), Collector({}), tmp_path, "advice")
    try:
        # 1 Mbit/s: a report every 8 frames of 1514 B at full rate, 97 ms apart; four of those gaps
        assert loop.mouse_timeout_s["10.0.3.1"] == pytest.approx(4 * 8 * 1514 * 8 / 1e6)
    finally:
        loop.close()
