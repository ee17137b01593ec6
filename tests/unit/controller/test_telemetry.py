"""The INT collector: reports → per-port queue, latency, wrap-safe tx rate, utilisation, flow paths."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from controller.telemetry import Collector, HopLateness, decode_report, payload_bytes
from emulation.fidelity import read_records
from tests.unit.softswitch.test_inband import Fabric, frame_from
from wire.fidelity import FidelityWindows
from wire.intmd import DSCP_INT, Hop, IntStack


def report(hops: list[Hop], sport: int = 4000, payload: bytes = b"payload") -> bytes:
    stack = IntStack(orig_dscp=0, remaining_hop_cnt=6 - len(hops), hops=hops)
    return bytes(Ether() / IP(src="10.0.3.1", dst="10.0.4.1", tos=DSCP_INT << 2) / UDP(sport=sport, dport=5000)
                 / (stack.pack() + payload))


def hop(node: int, port: int, tx_bytes: int, ts_us: int, queue: int = 0, latency: int = 50) -> Hop:
    return Hop(node, 1, port, latency, queue, ts_us, tx_bytes, 20)


def test_reports_from_the_fabric_give_the_flow_path_and_port_state(tmp_path):
    fabric = Fabric()
    fabric.carry(frame_from(fabric, "h1", "h5", UDP(sport=4000, dport=5000)), "h1")
    (_, _, _, frame), = fabric.reports
    names = {address.device_id: name for name, address in fabric.plan.switches.items()}
    collector = Collector(names, series=tmp_path / "telemetry.csv")
    stack = collector.feed(frame)
    assert stack is not None and len(stack.hops) == 3
    snap = collector.snapshot()
    path = snap.flows[("10.0.3.1", "10.0.4.1", 17, 4000, 5000)].hops
    assert [p[0] for p in path][0] == "s3" and path[-1] == ("s4", 5 if path[1][2] == 1 else 6, 1)
    assert ("s4", 1) in snap.ports and snap.ports[("s4", 1)].capacity_mbps == 20
    collector.close()
    assert (tmp_path / "telemetry.csv").read_text().count("\n") == 1 + 3


def test_tx_rate_is_wrap_safe_and_utilisation_uses_capacity():
    collector = Collector({7: "s7"})
    start = (1 << 32) - 50_000  # the byte counter wraps between the two reports
    collector.feed(report([hop(7, 3, start, 1_000_000)]))
    assert collector.snapshot().ports[("s7", 3)].tx_rate_mbps is None
    collector.feed(report([hop(7, 3, (start + 250_000) % (1 << 32), 1_100_000, queue=12)]))
    state = collector.snapshot().ports[("s7", 3)]
    assert abs(state.tx_rate_mbps - 20.0) < 1e-9  # 250 kB in 100 ms
    assert abs(state.utilisation - 1.0) < 1e-9 and state.queue_pkts == 12


def test_the_standing_queue_is_the_least_over_20_ms_or_8_frame_times_on_a_slow_link():
    def standing(capacity_mbps: int, gap_us: int) -> int:
        collector = Collector({7: "s7"})
        for i, queue in enumerate([1, 6, 7]):  # a short dip, then a queue that stays
            collector.feed(report([Hop(7, 1, 3, 50, queue, 1_000_000 + i * gap_us, i * 1500, capacity_mbps)]))
        return collector.snapshot().ports[("s7", 3)].standing_queue_pkts

    assert standing(20, 15_000) == 6  # 20 Mbit/s: 20 ms of switch time holds the last two readings
    assert standing(1, 15_000) == 1  # 1 Mbit/s: 8 frames are 96 ms, the dip 30 ms ago still counts
    assert standing(1, 60_000) == 6


def test_state_ages_out_and_bad_reports_are_counted():
    collector = Collector({7: "s7"}, max_age_s=1.0)
    collector.feed(report([hop(7, 3, 0, 10)]), now=100.0)
    assert collector.feed(b"\x00" * 60) is None and collector.bad_reports == 1
    truncated = report([hop(7, 3, 0, 10)])[:60]
    assert collector.feed(truncated) is None and collector.bad_reports == 2
    assert collector.expire(now=100.5) == 0
    assert collector.expire(now=101.5) == 2
    snap = collector.snapshot()
    assert not snap.ports and not snap.flows


def test_decode_report_reads_the_five_tuple():
    stack, flow = decode_report(report([hop(1, 2, 3, 4)], sport=4242))
    assert flow == ("10.0.3.1", "10.0.4.1", 17, 4242, 5000) and stack.hops[0].tx_bytes == 3


def test_bmv2_hops_are_timed_beyond_their_queue_into_fidelity_windows(tmp_path):
    """A hop that waited what its queue explains is on time; one held 5 ms more is a late event of
    5 ms, in the window the report arrived in; switches with their own monitor are not timed."""
    path = tmp_path / "fidelity.csv"
    lateness = HopLateness({"s7": FidelityWindows(path, "s7", "switch")})
    collector = Collector({7: "s7", 8: "s8"}, lateness=lateness)
    drain_us = (10 + 1) * 1500 * 8 / 20  # 10 queued packets and its own slot at 20 Mbit/s: 6.6 ms
    t0 = 1_000_000.05
    with patch("controller.telemetry.time.time", return_value=t0):
        collector.feed(report([hop(7, 2, 1000, 10, queue=10, latency=int(drain_us + 300))]))
        collector.feed(report([hop(8, 2, 1000, 10, queue=0, latency=9000)]))  # s8: not ours to time
    with patch("controller.telemetry.time.time", return_value=t0 + 0.1):
        collector.feed(report([hop(7, 2, 2000, 20, queue=10, latency=int(drain_us + 5000))]))
    collector.close()
    records = read_records(path)
    assert [(r.source, r.events, r.late_events) for r in records] == [("s7", 1, 0), ("s7", 1, 1)]
    assert records[0].max_late_ms == pytest.approx(0.3) and records[1].max_late_ms == pytest.approx(5.0)
    assert records[1].late_from == pytest.approx(t0 + 0.1 - 0.005)


def test_snapshots_are_immutable_per_version_and_listeners_hear_every_change():
    collector = Collector({7: "s7"}, max_age_s=1.0)
    heard = []
    collector.on_change(lambda: heard.append(collector.version))
    collector.feed(report([hop(7, 3, 0, 10, queue=4)]), now=100.0)
    first = collector.snapshot()
    assert collector.snapshot() is first  # built once per version
    collector.feed(report([hop(7, 3, 1000, 30_000, queue=9)], sport=4001), now=100.1)
    second = collector.snapshot()
    assert first.ports[("s7", 3)].queue_pkts == 4 and second.ports[("s7", 3)].queue_pkts == 9
    assert len(first.flows) == 1 and len(second.flows) == 2  # the old snapshot did not move
    with pytest.raises(TypeError):
        second.ports[("s7", 4)] = second.ports[("s7", 3)]  # read-only
    assert collector.feed(b"\x00" * 60) is None  # a bad report changes nothing
    collector.expire(now=102.0)
    assert heard == [1, 2, 3] and not collector.snapshot().flows


def ack_report(hops: list[Hop], payload: bytes = b"") -> bytes:
    stack = IntStack(orig_dscp=0, remaining_hop_cnt=6 - len(hops), hops=hops)
    return bytes(Ether() / IP(src="10.0.4.1", dst="10.0.3.1", tos=DSCP_INT << 2)
                 / TCP(sport=5201, dport=40000, flags="A") / (stack.pack() + payload))


def test_a_flow_of_pure_acks_is_seen_but_carries_no_data_until_a_packet_has_payload():
    collector = Collector({7: "s7"})
    key = ("10.0.4.1", "10.0.3.1", 6, 5201, 40000)
    assert payload_bytes(ack_report([hop(7, 3, 0, 10)])) == 0
    collector.feed(ack_report([hop(7, 3, 0, 10)]), now=1.0)
    assert collector.snapshot().flows[key].data_at is None
    collector.feed(ack_report([hop(7, 3, 0, 20)], payload=b"x" * 100), now=2.0)
    assert payload_bytes(ack_report([hop(7, 3, 0, 20)], payload=b"x" * 100)) == 100
    collector.feed(ack_report([hop(7, 3, 0, 30)]), now=3.0)  # an ACK after data keeps the data time
    flow = collector.snapshot().flows[key]
    assert flow.updated == 3.0 and flow.data_at == 2.0


def test_the_flow_log_has_one_row_per_flow_when_its_first_data_arrives(tmp_path):
    collector = Collector({7: "s7", 8: "s8"}, flow_log=tmp_path / "int-flows.csv")
    hops = [hop(8, 1, 0, 900), hop(7, 3, 0, 500)]  # newest first: s7 was the source, s8 the sink
    collector.feed(report(hops))
    collector.feed(report(hops))  # the same flow again: no second row
    collector.feed(report(hops, sport=4001))
    collector.close()
    rows = (tmp_path / "int-flows.csv").read_text().splitlines()
    assert rows[0] == "time,src,dst,proto,sport,dport,path,source_egress_us,sink_egress_us"
    assert [r.split(",")[1:] for r in rows[1:]] == [["10.0.3.1", "10.0.4.1", "17", str(sport), "5000", "s7 s8",
                                                     "500", "900"] for sport in (4000, 4001)]


def test_hop_latencies_are_counted_in_a_histogram_per_port():
    collector = Collector({7: "s7"})
    for i, latency in enumerate((50, 100, 101, 30_000, 400_000)):  # µs; 100 is the first bucket's upper bound
        collector.feed(report([hop(7, 3, i, 10 + i, latency=latency)]))
    collector.feed(report([Hop(7, 1, 3, 0xFFFFFFFF, 0, 20, 5, 20)]))  # a latency the target could not tell: not counted
    counts, sum_us = collector.latency_histograms()[("s7", 3)]
    assert counts == (2, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1)
    assert sum_us == 50 + 100 + 101 + 30_000 + 400_000
