"""The soft switch pipeline and egress queue, programmed by the controller's own updates (no root)."""

from __future__ import annotations

import random

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from controller.program import switch_program
from controller.routing import compute_routes, port_configs
from softswitch.egress import EgressQueue
from softswitch.inband import IntPending
from softswitch.pipeline import Pipeline, mark_ce
from softswitch.runtime_state import RuntimeState
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire.drops import DROP_INDEX
from wire.intmd import parse
from wire.p4info import P4Schema


@pytest.fixture(scope="module")
def fabric():
    topo = leafspine()
    plan = AddressPlan(topo)
    return topo, plan, compute_routes(topo, plan)


def programmed(fabric, switch: str) -> Pipeline:
    topo, plan, routes = fabric
    schema = P4Schema.load()
    state = RuntimeState(schema)
    for update in switch_program(schema, topo, plan, switch, routes[switch], int_sample_log2=None):  # no INT
        state.apply(update)
    return Pipeline(state)


def udp(src: str, dst: str, sport: int, ttl: int = 64, payload: bytes = b"x" * 20) -> bytes:
    return bytes(Ether(src="00:00:0a:00:03:01", dst="02:53:00:03:00:01") /
                 IP(src=src, dst=dst, ttl=ttl) / UDP(sport=sport, dport=9) / payload)


def test_leaf_forwards_to_local_host_and_rewrites_macs_ttl_checksum(fabric):
    _, plan, _ = fabric
    pipeline = programmed(fabric, "s3")
    h1, h2 = plan.hosts["h1"], plan.hosts["h2"]
    port, out = pipeline.ingress(udp(h1.ip, h2.ip, 1234), in_port=1)
    assert port == 2
    frame = Ether(bytes(out))
    assert (frame.dst, frame.src) == (h2.mac, plan.mac_of("s3", 2))
    assert frame[IP].ttl == 63
    recomputed = IP(bytes(frame[IP]))
    del recomputed.chksum
    assert frame[IP].chksum == IP(bytes(recomputed)).chksum


def test_remote_host_goes_up_one_of_two_uplinks_chosen_by_five_tuple(fabric):
    _, plan, _ = fabric
    pipeline = programmed(fabric, "s3")
    h1, h5 = plan.hosts["h1"], plan.hosts["h5"]
    ports = {pipeline.ingress(udp(h1.ip, h5.ip, sport), 1)[0] for sport in range(20000, 20032)}
    assert ports == {5, 6}
    again = {pipeline.ingress(udp(h1.ip, h5.ip, 20000), 1)[0] for _ in range(5)}
    assert len(again) == 1, "one 5-tuple must always take the same path"


def test_dead_uplink_is_skipped_by_the_selector(fabric):
    _, plan, _ = fabric
    pipeline = programmed(fabric, "s3")
    pipeline.set_port_up(5, False)
    h1, h5 = plan.hosts["h1"], plan.hosts["h5"]
    ports = {pipeline.ingress(udp(h1.ip, h5.ip, sport), 1)[0] for sport in range(20000, 20032)}
    assert ports == {6}
    pipeline.set_port_up(6, False)
    assert pipeline.ingress(udp(h1.ip, h5.ip, 20000), 1) is None
    assert pipeline.drop_counts()["no_live_member"] == 1


@pytest.mark.parametrize("frame, reason", [
    (b"\x00" * 10, "malformed"),
    (bytes(Ether() / ARP()), "non_ipv4"),
    (bytes(Ether(type=0x0800)) + b"\x45\x00\x00\x14" + b"\x00" * 4, "malformed"),  # truncated IPv4 header
    (bytes(Ether(type=0x0800)) + b"\x4f" + b"\x00" * 30, "malformed"),            # IHL 15 > frame
    (bytes(Ether(type=0x0800)) + b"\x65" + b"\x00" * 30, "malformed"),            # version 6 in IPv4 type
    (udp("10.0.3.1", "192.168.1.1", 1), "no_route"),
    (udp("10.0.3.1", "10.0.3.2", 1, ttl=1), "ttl_expired"),
    (udp("10.0.3.1", "192.168.1.1", 1, ttl=1), "ttl_expired"),  # starnet.p4 checks TTL before ipv4_lpm
])
def test_bad_frames_are_counted_and_dropped(fabric, frame, reason):
    pipeline = programmed(fabric, "s3")
    assert pipeline.ingress(frame, 1) is None
    assert pipeline.drop_counts()[reason] == 1
    assert sum(pipeline.drop_counts().values()) == 1
    # The same count in the P4 counter drop_reason, at the reason's index, with the frame's bytes.
    index = DROP_INDEX[reason]
    assert (pipeline.reason_packets[index], pipeline.reason_bytes[index]) == (1, len(frame))
    assert sum(pipeline.reason_packets) == 1


def test_icmp_without_l4_ports_is_forwarded(fabric):
    _, plan, _ = fabric
    pipeline = programmed(fabric, "s3")
    frame = bytes(Ether() / IP(src=plan.hosts["h1"].ip, dst=plan.hosts["h5"].ip) / ICMP())
    assert pipeline.ingress(frame, 1)[0] in (5, 6)


def test_table_write_invalidates_flow_cache(fabric):
    _, plan, _ = fabric
    pipeline = programmed(fabric, "s3")
    h1, h2 = plan.hosts["h1"], plan.hosts["h2"]
    assert pipeline.ingress(udp(h1.ip, h2.ip, 1), 1) is not None
    pipeline.state.clear()
    assert pipeline.ingress(udp(h1.ip, h2.ip, 1), 1) is None
    assert pipeline.drop_counts()["no_route"] == 1


class Wire:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send(self, frame: bytes) -> int:
        self.frames.append(bytes(frame))
        return len(frame)


def test_egress_queue_drains_at_rate_and_tail_drops_at_depth():
    wire = Wire()
    q = EgressQueue(5, wire.send, rate_mbps=8.0, depth_pkts=10, now=0.0)
    frame = b"\x00" * 1000
    results = [q.enqueue(frame, 0.0) for _ in range(20)]
    sent_at_once = len(wire.frames)
    assert sent_at_once == 3  # burst: max(1 ms at 1 MB/s, one 1514 B frame) + one 1514 B frame = 3028 B
    assert results.count(-1) == 20 - sent_at_once - 10 and q.drops == 7
    assert q.max_qdepth == 10
    # 1 MB/s drains one 1000 B frame per millisecond; a wake-up 5 ms late still sends all five.
    q.service(0.005)
    assert len(wire.frames) == sent_at_once + 5
    q.service(1.0)
    assert len(wire.frames) == 13 and q.qdepth == 0
    assert q.stats()["tx_pkts"] == 13


def test_port_config_comes_from_link_capacity_and_depth(fabric):
    topo, _, _ = fabric
    configs = {pc.port: pc for pc in port_configs(topo, "s3")}
    assert sorted(configs) == [1, 2, 3, 4, 5, 6]
    assert configs[5].capacity_mbps == 20 and configs[5].queue_pkts == 64 and configs[5].ecn_threshold_pkts == 16
    assert configs[1].role == 1 and configs[5].role == 2


def test_probe_frames_are_punted_with_their_ingress_port(fabric):
    pipeline = programmed(fabric, "s1")
    punted = []
    pipeline.packet_in = lambda frame, port, reason: punted.append((port, reason, frame))
    probe = bytes(Ether(src="02:53:00:01:00:02", dst="ff:ff:ff:ff:ff:ff", type=0x88B5) / (b"\x00" * 46))
    assert pipeline.ingress(probe, 2) is None
    assert punted == [(2, 2, probe)]
    assert pipeline.drop_counts()["no_controller"] == 0


def test_probes_no_controller_takes_are_counted_not_lost(fabric):
    pipeline = programmed(fabric, "s1")
    probe = bytes(Ether(src="02:53:00:01:00:02", dst="ff:ff:ff:ff:ff:ff", type=0x88B5) / (b"\x00" * 46))
    pipeline.ingress(probe, 2)  # no P4Runtime service attached
    pipeline.packet_in = lambda frame, port, reason: False  # attached, but no primary client
    pipeline.ingress(probe, 2)
    assert pipeline.drop_counts()["no_controller"] == 2
    assert pipeline.reason_packets[DROP_INDEX["no_controller"]] == 2


def test_malformed_frames_count_in_the_p4_counter(fabric):
    pipeline = programmed(fabric, "s3")
    pipeline.ingress(bytes(Ether(type=0x0800)) + b"\x4f" + b"\x00" * 30, 3)
    assert (pipeline.malformed[3], pipeline.malformed_bytes[3]) == (1, 45)


@pytest.mark.parametrize("ecn, marked", [(0, False), (1, True), (2, True), (3, True)])
def test_mark_ce_sets_ce_on_ect_only_and_keeps_the_checksum_valid(ecn, marked):
    frame = bytearray(udp("10.0.3.1", "10.0.4.1", 5))
    frame[15] = (frame[15] & ~3) | ecn
    original = IP(bytes(frame[14:]))
    del original.chksum
    frame[24:26] = IP(bytes(original)).chksum.to_bytes(2, "big")
    assert mark_ce(frame) is marked
    ip = IP(bytes(frame[14:]))
    assert ip.tos & 3 == (3 if marked else 0)
    check = ip.chksum
    del ip.chksum
    assert IP(bytes(ip)).chksum == check


def test_egress_queue_marks_ce_at_the_threshold():
    wire = Wire()
    q = EgressQueue(5, wire.send, rate_mbps=8.0, depth_pkts=64, now=0.0)
    q.ecn_threshold = 4
    frame = bytearray(udp("10.0.3.1", "10.0.4.1", 5, payload=b"x" * 958))  # 1000 B: 3 fit the burst
    frame[15] |= 2  # ECT(0)
    for _ in range(20):
        q.enqueue(bytearray(frame), 0.0)
    q.service(1.0)
    ecn = [Ether(f)[IP].tos & 3 for f in wire.frames]
    queued_from = ecn.index(3)
    assert queued_from == 3 + 4  # three sent at once, then the queue fills to the threshold
    assert all(e == 2 for e in ecn[:queued_from]) and all(e == 3 for e in ecn[queued_from:])
    assert q.ce_marked == 20 - queued_from


def test_int_sampling_is_configurable_and_can_be_off(fabric):
    topo, plan, routes = fabric
    schema = P4Schema.load()

    def watches(sample):
        updates = switch_program(schema, topo, plan, "s3", routes["s3"], int_sample_log2=sample)
        return [u.entity.table_entry.action.action.params[0].value for u in updates
                if u.entity.table_entry.table_id == schema.id_of("StarIngress.int_source")]

    assert watches(5) == [b"\x05", b"\x05"]  # TCP and UDP, 1 in 32
    assert watches(None) == []


def int_pipeline(fabric, switch: str = "s3") -> Pipeline:
    """The switch's program with INT on every packet (source on host ports)."""
    topo, plan, routes = fabric
    schema = P4Schema.load()
    state = RuntimeState(schema)
    for update in switch_program(schema, topo, plan, switch, routes[switch], int_sample_log2=0):
        state.apply(update)
    return Pipeline(state)


def test_a_new_flows_first_data_packet_starts_int_then_sampling_takes_over(fabric):
    """int_flow_seen: with sampling at 1 in 2^15, a flow's first packet with payload carries INT, its
    next ones (almost) never; pure ACKs never count as a flow's first data; a new flow starts again."""
    topo, plan, routes = fabric
    schema = P4Schema.load()
    state = RuntimeState(schema)
    for update in switch_program(schema, topo, plan, "s3", routes["s3"], int_sample_log2=15):
        state.apply(update)
    pipeline = Pipeline(state, rng=random.Random(7))

    def carries_int(l4, payload: bytes = b"x" * 100) -> bool:
        frame = bytes(Ether(src="00:00:0a:00:03:01", dst="02:53:00:03:00:01") / IP(src="10.0.3.1", dst="10.0.4.1")
                      / l4 / payload)
        result = pipeline.ingress(frame, 1)
        assert result is not None
        return isinstance(result[1], IntPending)

    ack = TCP(sport=1000, dport=80, flags="A")
    assert not carries_int(ack, b"")  # a pure ACK is no data: the flow stays new
    assert carries_int(TCP(sport=1000, dport=80, flags="PA"))
    assert sum(carries_int(TCP(sport=1000, dport=80, flags="PA")) for _ in range(200)) <= 1
    assert carries_int(UDP(sport=1000, dport=80))  # another 5-tuple: a new flow
    assert not carries_int(UDP(sport=1000, dport=80), b"")  # header only: no data
    assert not carries_int(UDP(sport=1000, dport=80))


def test_the_controllers_int_dscp_is_what_a_source_marks_and_a_transit_reads(fabric):
    """switch_program(int_dscp=0x0A): s3 starts INT marked AF11 (the original DSCP kept in the
    shim), and a transit switch programmed the same way takes that frame for INT."""
    topo, plan, routes = fabric
    schema = P4Schema.load()
    pipelines = {}
    for name in ("s3", "s1"):
        state = RuntimeState(schema)
        for update in switch_program(schema, topo, plan, name, routes[name], int_sample_log2=0, int_dscp=0x0A):
            state.apply(update)
        pipelines[name] = Pipeline(state)
    frame = bytes(Ether(src="00:00:0a:00:03:01", dst="02:53:00:03:00:01")
                  / IP(src="10.0.3.1", dst="10.0.4.1", tos=0x2E << 2) / UDP(sport=7, dport=7) / (b"x" * 64))
    port, pending = pipelines["s3"].ingress(frame, 1, now=0.0)
    assert isinstance(pending, IntPending)
    out = pipelines["s3"].int_engine.egress(pending, port, 0, 0.0)
    assert out[15] >> 2 == 0x0A and parse(out, 42).orig_dscp == 0x2E
    result = pipelines["s1"].ingress(bytes(out), 1, now=0.0)  # into the spine (its port 1: a leaf)
    assert result is not None and isinstance(result[1], IntPending)  # transit INT at the spine


def short_l4(proto: int, tos: int, l4_bytes: int) -> bytes:
    """Ethernet + IPv4 (IHL 5, to h5) + only `l4_bytes` of the L4 header (issue "Robustness": the
    40-byte DSCP 0x20 TCP frame with 6 bytes of TCP used to kill the data plane)."""
    ip = IP(src="10.0.3.1", dst="10.0.4.1", tos=tos, proto=proto, ttl=64)
    ip.len = 20 + l4_bytes
    return bytes(Ether(src="00:00:0a:00:03:01", dst="02:53:00:03:00:01") / ip) + bytes(range(l4_bytes))


@pytest.mark.parametrize("proto", [6, 17])
@pytest.mark.parametrize("tos", [0x00, 0x80])  # plain, and DSCP 0x20 (claims INT)
@pytest.mark.parametrize("l4_bytes", [0, 4, 6, 7, 8, 12, 19])
def test_short_l4_headers_never_raise_and_valid_frames_still_flow(fabric, proto, tos, l4_bytes):
    pipeline = int_pipeline(fabric)
    frame = short_l4(proto, tos, l4_bytes)
    result = pipeline.ingress(frame, 1, now=0.0)  # must not raise, whatever it decides
    if tos == 0x80 and (proto == 6 or l4_bytes < 8):
        # Claims INT but has no whole L4 header in front of it: malformed, counted.
        assert result is None and pipeline.malformed[1] == 1, (result, pipeline.malformed[1])
    valid = pipeline.ingress(udp("10.0.3.1", "10.0.4.1", 4242), 1, now=0.0)
    assert valid is not None and valid[0] in (5, 6)


def test_tcp_data_offset_below_five_is_not_read_as_int(fabric):
    pipeline = int_pipeline(fabric)
    frame = bytearray(short_l4(6, 0x80, 40))
    frame[14 + 20 + 12] = 0x20  # data offset 2 words: a 20-byte header, as starnet.p4 extracts it
    result = pipeline.ingress(bytes(frame), 1, now=0.0)
    assert result is not None and pipeline.malformed[1] == 0
    assert pipeline.int_plain[1] == 1  # what follows 20 bytes of TCP is no INT header: plain (CS4) traffic
    if isinstance(result[1], IntPending):  # a host port: the switch may start INT on it, after those 20 bytes
        assert result[1].int_off == 54
