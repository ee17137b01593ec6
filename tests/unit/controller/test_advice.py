"""The advice loop's demands: a flow whose reported packets are pure ACKs (the reverse direction of a
TCP transfer) is no demand, so it does not halve its host's NIC for the host's own transfer."""

from __future__ import annotations

import time

import pytest

from controller.advice import AdviceLoop
from controller.telemetry import Collector
from tests.unit.controller.test_telemetry import ack_report, hop, report
from topologies import leafspine
from topologies.addressing import AddressPlan


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
        # h1 → h5 with data; h5 → h1 only ACKs (reports list hops newest first)
        collector.feed(report([hop(ids["s4"], 1, 0, 10), hop(ids["s1"], 2, 0, 10), hop(ids["s3"], 5, 0, 10)]),
                       now=now)
        collector.feed(ack_report([hop(ids["s3"], 1, 0, 10), hop(ids["s1"], 1, 0, 10), hop(ids["s4"], 5, 0, 10)]),
                       now=now)
        demands = loop.demands(now, collector.snapshot())
        assert [(d.src, d.dst) for d in demands] == [("10.0.3.1", "10.0.4.1")]
        advice = loop.step(now)
        assert advice == {("10.0.3.1", "10.0.4.1"): 20e6 * 0.95}
    finally:
        loop.close()


def test_a_reply_of_one_data_report_is_a_demand_only_briefly_a_transfer_for_a_second(tmp_path):
    ids, collector, loop = leafspine_loop(tmp_path)
    try:
        now = time.monotonic()
        for i in range(3):  # h1 → h5: a transfer, three reports with data
            collector.feed(report([hop(ids["s4"], 1, i, 10 + i), hop(ids["s1"], 2, i, 10 + i),
                                   hop(ids["s3"], 5, i, 10 + i)]), now=now)
        # h5 → h1: one report with data (the receiver's reply)
        collector.feed(ack_report([hop(ids["s3"], 1, 0, 10), hop(ids["s1"], 1, 0, 10), hop(ids["s4"], 5, 0, 10)],
                                  payload=b"done"), now=now)
        pairs = {(d.src, d.dst) for d in loop.demands(now, collector.snapshot())}
        assert pairs == {("10.0.3.1", "10.0.4.1"), ("10.0.4.1", "10.0.3.1")}
        assert loop.mouse_timeout_s["10.0.4.1"] == pytest.approx(0.2)  # 20 Mbit/s: 4 report gaps are 19 ms
        later = now + 0.3
        assert {(d.src, d.dst) for d in loop.demands(later, collector.snapshot())} == {("10.0.3.1", "10.0.4.1")}
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
