"""The advice loop's demands: a flow whose reported packets are pure ACKs (the reverse direction of a
TCP transfer) is no demand, so it does not halve its host's NIC for the host's own transfer."""

from __future__ import annotations

import time

from controller.advice import AdviceLoop
from controller.telemetry import Collector
from tests.unit.controller.test_telemetry import ack_report, hop, report
from topologies import leafspine
from topologies.addressing import AddressPlan


def test_only_flows_that_carry_data_are_demands(tmp_path):
    topo = leafspine()
    plan = AddressPlan(topo)
    ids = {name: plan.switches[name].device_id for name in ("s1", "s3", "s4")}
    collector = Collector({i: n for n, i in ids.items()})
    loop = AdviceLoop(topo, plan, collector, tmp_path, "advice")
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
