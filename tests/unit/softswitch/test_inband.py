"""INT end to end through three soft-switch pipelines (leaf → spine → leaf), and INT robustness."""

from __future__ import annotations

import random

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from controller import entities as ent
from controller.program import switch_program
from controller.routing import compute_routes
from softswitch.egress import EgressQueue
from softswitch.inband import REPORT_CONGESTED_INTERVAL_S, REPORT_INTERVAL_S, IntPending
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire.cpu import REPORT_TRUNCATE_BYTES
from wire.intmd import DSCP_INT, FIXED_BYTES, HOP_BYTES, IntStack, dissect_int, int_length, parse, set_tos
from wire.p4info import P4Schema


class Fabric:
    """The default leaf-spine's pipelines, wired together in Python (no sockets).

    The tests drive the clock: `now` (monotonic seconds, the switches' INT clocks start at 0) moves
    only when a test moves it, so report rate limits and hop latencies do not depend on wall time."""

    def __init__(self) -> None:
        self.now = 1.0
        self.topo = leafspine()
        self.plan = AddressPlan(self.topo)
        routes = compute_routes(self.topo, self.plan)
        schema = P4Schema.load()
        self.reports: list[tuple[str, int, int, bytes]] = []
        self.pipelines: dict[str, Pipeline] = {}
        self.queues: dict[tuple[str, int], EgressQueue] = {}
        self.wire: list[tuple[str, int, bytes]] = []
        for sw in self.topo.switches:
            state = RuntimeState(schema)
            for update in switch_program(schema, self.topo, self.plan, sw.name, routes[sw.name]):
                state.apply(update)
            if sw.name in ("s3", "s4"):  # INT on every packet (the controller samples 1 in 8)
                for proto in (6, 17):
                    state.apply(ent.modify(ent.table_entry(
                        schema, "StarIngress.int_source", {"hdr.ipv4.protocol": (proto, 0xFF)},
                        action_call=ent.action(schema, "StarIngress.int_watch", sample_log2=0), priority=1)))
            pipeline = Pipeline(state)
            pipeline.int_engine.epoch = 0.0
            pipeline.packet_in = lambda frame, port, reason, name=sw.name: self.reports.append(
                (name, port, reason, frame))
            self.pipelines[sw.name] = pipeline
            for link in self.topo.links_of(sw.name):
                port = link.port_of(sw.name)
                queue = EgressQueue(port, lambda f, s=sw.name, p=port: self.wire.append((s, p, bytes(f))) or len(f),
                                    0.0, 64, 0.0)
                queue.int_egress = pipeline.int_engine.egress
                self.queues[(sw.name, port)] = queue

    def carry(self, frame: bytes, host: str) -> tuple[bytes | None, list[str]]:
        """Send `frame` from `host`; return what the destination host receives and the switch path."""
        link = self.topo.links_of(host)[0]
        node, port = (link.b, link.b_port) if link.a == host else (link.a, link.a_port)
        path = []
        while True:
            path.append(node)
            result = self.pipelines[node].ingress(frame, port, self.now)
            if result is None:
                return None, path
            out_port, out = result
            self.wire.clear()
            self.queues[(node, out_port)].enqueue(out, self.now)
            (_, _, frame), = self.wire
            neighbour, nlink = [(n, lk) for n, lk in self.topo.neighbours(node) if lk.port_of(node) == out_port][0]
            if self.topo.is_host(neighbour):
                return frame, path
            node, port = neighbour, nlink.port_of(neighbour)


@pytest.fixture()
def fabric() -> Fabric:
    return Fabric()


def frame_from(fabric: Fabric, src: str, dst: str, l4, payload: bytes = b"hello, fabric" * 5, tos: int = 0x28):
    a, b = fabric.plan.hosts[src], fabric.plan.hosts[dst]
    return bytes(Ether(src=a.mac, dst=a.gateway_mac) / IP(src=a.ip, dst=b.ip, ttl=64, tos=tos) / l4 / payload)


@pytest.mark.parametrize("l4", [UDP(sport=4000, dport=5000), TCP(sport=4001, dport=5001, flags="PA", seq=7)])
def test_int_is_stripped_to_the_original_bytes_and_reported_with_the_path(fabric, l4):
    sent = frame_from(fabric, "h1", "h5", l4)
    received, path = fabric.carry(sent, "h1")
    assert received is not None and len(path) == 3
    # Everything above the MACs is as sent except the TTL (3 hops) and the IPv4 checksum.
    rx, tx = Ether(received), Ether(sent)
    assert rx[IP].ttl == 61 and rx[IP].tos == 0x28 and rx[IP].len == tx[IP].len
    assert bytes(rx[IP].payload) == bytes(tx[IP].payload)
    check = rx[IP].chksum
    del rx[IP].chksum
    assert IP(bytes(rx[IP])).chksum == check
    # One report, from the sink leaf, carrying every hop newest first with the ports it used.
    (switch, in_port, reason, report), = fabric.reports
    assert (switch, reason) == ("s4", 1)
    stack = parse(report, 34 + (8 if isinstance(l4, UDP) else 20))
    assert [h.node_id for h in stack.hops] == [fabric.plan.switches[s].device_id for s in reversed(path)]
    spine = path[1]
    s3_up = [lk.port_of("s3") for n, lk in fabric.topo.neighbours("s3") if n == spine][0]
    assert (stack.hops[2].ingress_port, stack.hops[2].egress_port) == (1, s3_up)
    assert stack.hops[0].egress_port == fabric.plan.hosts["h5"].switch_port
    assert all(h.capacity_mbps == 20 for h in stack.hops)
    assert stack.remaining_hop_cnt == 3 and stack.orig_dscp == 0x28 >> 2
    shown = dissect_int(Ether(report))
    assert shown["INT-MD header"].remaining_hop_cnt == 3 and len(shown["INT-MD header"].hops) == 3


def test_a_report_carries_the_first_512_bytes_as_starnet_p4_truncates_it(fabric):
    """The controller's clone session has no truncation (BMv2's PI has none); the program's
    truncate() cuts every report to REPORT_TRUNCATE_BYTES of frame, on both targets."""
    sent = frame_from(fabric, "h1", "h5", UDP(sport=4000, dport=5000), payload=b"\xab" * 1200)
    received, _ = fabric.carry(sent, "h1")
    assert received is not None and len(received) == len(sent)
    (_, _, _, report), = fabric.reports
    assert len(report) == REPORT_TRUNCATE_BYTES
    assert parse(report, 34 + 8).remaining_hop_cnt == 3  # the whole INT stack is in it


def test_same_leaf_traffic_gets_int_and_loses_it_in_one_switch(fabric):
    sent = frame_from(fabric, "h1", "h2", UDP(sport=1, dport=2))
    received, path = fabric.carry(sent, "h1")
    assert path == ["s3"] and bytes(Ether(received)[IP].payload) == bytes(Ether(sent)[IP].payload)


def test_a_switch_that_is_source_and_sink_sends_the_frame_unchanged_and_reports_when_due(fabric):
    """Within one leaf the frame never carries INT on the wire: it leaves as INT-off would send it,
    whether a report is due (the first, then one per interval, or at once when the hop is congested)
    or rate-limited; a due report carries the INT header and this switch's one hop."""
    sent = frame_from(fabric, "h1", "h2", UDP(sport=7, dport=8))
    reference = fabric.pipelines["s3"].ingress(sent, 1, fabric.now)
    assert reference is not None
    plain = bytes(reference[1].frame if isinstance(reference[1], IntPending) else reference[1])
    assert plain[15] >> 2 != DSCP_INT
    for _ in range(5):
        received, _ = fabric.carry(sent, "h1")
        assert received == plain
        fabric.now += REPORT_INTERVAL_S / 10
    (switch, _, _, report), = fabric.reports
    stack = dissect_int(Ether(report))
    assert switch == "s3" and stack is not None and len(stack.hops) == 1
    assert fabric.pipelines["s3"].int_engine.rate_limited == 4
    engine = fabric.pipelines["s3"].int_engine
    assert engine.config.ecn_thresholds[2] > 0
    item = fabric.pipelines["s3"].ingress(sent, 1, fabric.now)[1]
    item.qdepth = engine.config.ecn_thresholds[2]  # the hop saw its port's threshold: reported at once
    assert engine.egress(item, 2, 0, fabric.now) == plain
    assert len(fabric.reports) == 2


def test_a_pure_ack_never_starts_int_a_data_packet_of_its_flow_does(fabric):
    """INT rides on payload (starnet.p4 and the soft switch alike): the ACK flows' reports were half
    of all reports and said nothing the data's did not."""
    ack = frame_from(fabric, "h1", "h5", TCP(sport=4000, dport=5000, flags="A"), payload=b"")
    received, _ = fabric.carry(ack, "h1")
    assert received is not None and Ether(received)[IP].tos == Ether(ack)[IP].tos
    assert fabric.reports == [] and Ether(received)[IP].len == Ether(ack)[IP].len
    data = frame_from(fabric, "h1", "h5", TCP(sport=4000, dport=5000, flags="PA"))
    fabric.carry(data, "h1")
    (switch, _, _, report), = fabric.reports
    assert switch == "s4" and len(dissect_int(Ether(report)).hops) == 3


def test_reports_are_rate_limited_per_flow(fabric):
    sent = frame_from(fabric, "h1", "h5", UDP(sport=4000, dport=5000))
    for _ in range(20):
        fabric.carry(sent, "h1")
        fabric.now += REPORT_INTERVAL_S / 40
    assert len(fabric.reports) == 1
    assert fabric.pipelines["s4"].int_engine.rate_limited == 19
    fabric.now += REPORT_INTERVAL_S
    fabric.carry(sent, "h1")
    assert len(fabric.reports) == 2


def test_congested_reports_go_at_once_but_not_within_their_gap(fabric):
    """A hop at its ECN threshold: reported at once even inside the routine interval, yet at most
    once per REPORT_CONGESTED_INTERVAL_S per flow (a full queue under a fast flow flags every packet)."""
    sent = frame_from(fabric, "h1", "h2", UDP(sport=7, dport=8))
    engine = fabric.pipelines["s3"].int_engine
    threshold = engine.config.ecn_thresholds[2]

    def congested_departure() -> None:
        item = fabric.pipelines["s3"].ingress(sent, 1, fabric.now)[1]
        item.qdepth = threshold
        engine.egress(item, 2, 0, fabric.now)

    congested_departure()
    first = fabric.now
    assert len(fabric.reports) == 1
    for _ in range(4):  # four more inside the gap: rate-limited
        fabric.now += REPORT_CONGESTED_INTERVAL_S / 5
        congested_departure()
    assert len(fabric.reports) == 1 and engine.rate_limited == 4
    fabric.now = first + REPORT_CONGESTED_INTERVAL_S * 1.001  # the gap has passed, the routine interval not
    assert fabric.now - first < REPORT_INTERVAL_S
    congested_departure()
    assert len(fabric.reports) == 2


def test_a_report_no_controller_takes_is_not_a_drop_of_a_received_frame(fabric):
    """The report is a clone: lost, it is counted apart (int_reports_lost), while the frame it was
    cloned from is delivered — so rx = tx + punted + drops still balances to the frame."""
    sink = fabric.pipelines["s4"]
    sink.packet_in = lambda frame, port, reason: False  # attached, but no primary client
    sent = frame_from(fabric, "h1", "h5", UDP(sport=4000, dport=5000))
    received, _ = fabric.carry(sent, "h1")
    assert received is not None and bytes(Ether(received)[IP].payload) == bytes(Ether(sent)[IP].payload)
    assert sink.int_engine.reports == 1 and sink.int_engine.reports_lost == 1
    assert sum(sink.drop_counts().values()) == 0, sink.drop_counts()


def test_full_hop_budget_sets_e_and_pushes_nothing(fabric):
    a, b = fabric.plan.hosts["h1"], fabric.plan.hosts["h5"]
    stack = IntStack(orig_dscp=0, remaining_hop_cnt=0)
    frame = bytes(Ether(src=a.mac, dst="02:53:00:01:00:01") / IP(src=a.ip, dst=b.ip, tos=DSCP_INT << 2)
                  / UDP(sport=9, dport=9) / (stack.pack() + b"data"))
    pipeline = fabric.pipelines["s1"]
    port, pending = pipeline.ingress(frame, 1, fabric.now)
    assert isinstance(pending, IntPending)
    out = pipeline.int_engine.egress(pending, port, 0, fabric.now)
    parsed = parse(out, 42)
    assert parsed.e_flag and parsed.hops == []


def int_frame(fabric: Fabric, hops: int = 1) -> bytearray:
    """A valid INT frame as s1 (spine) receives it from s3."""
    sent = frame_from(fabric, "h1", "h5", UDP(sport=4000, dport=5000))
    port, pending = fabric.pipelines["s3"].ingress(sent, 1, fabric.now)
    return bytearray(fabric.pipelines["s3"].int_engine.egress(pending, port, 0, fabric.now))


@pytest.mark.parametrize("mutate", [
    lambda f: f.__setitem__(43, 40),                   # shim length of no whole number of hops
    lambda f: f.__setitem__(43, 3 + 4),                # not a whole number of hops either
    lambda f: f.__setitem__(46, (f[46] & 0x0F) | 0x10),  # MD version 1
    lambda f: f.__setitem__(42, 0x20),                 # shim type 2
    lambda f: f.__setitem__(49, 6),                    # 1 hop + 6 remaining: over the budget
    lambda f: f.__setitem__(48, f[48] & 0xE0 | 4),     # hop metadata length 4 words
])
def test_a_frame_with_the_int_dscp_but_no_valid_int_header_is_forwarded_as_plain(fabric, mutate):
    """Foreign traffic marked CS4 (issue "Edges"): not INT, so no hop is pushed and nothing is
    stripped; it is forwarded untouched but for TTL and MACs, and counted in int_dscp_plain."""
    frame = int_frame(fabric)
    int_length(frame, 42)  # valid before the mutation
    mutate(frame)
    spine = fabric.pipelines["s1"]
    in_port = 1
    port, out = spine.ingress(bytes(frame), in_port)
    assert isinstance(out, bytearray) and out[22] == frame[22] - 1  # routed: TTL, MACs, checksum change
    assert out[12:22] + out[23:24] + out[26:] == frame[12:22] + frame[23:24] + frame[26:]  # the rest does not
    assert spine.int_plain[in_port] == 1 and spine.malformed[in_port] == 0
    assert spine.drop_counts()["malformed"] == 0


@pytest.mark.parametrize("keep", [42 + 10, 42 + 16 + 20])  # inside the MD header, inside the hop
def test_int_cut_short_by_the_end_of_the_frame_is_malformed(fabric, keep):
    """A valid INT header whose stack the frame does not hold (its IPv4 length says it does): the P4
    parser's PacketTooShort, counted malformed and dropped."""
    frame = int_frame(fabric)
    spine = fabric.pipelines["s1"]
    assert spine.ingress(bytes(frame[:keep]), 1) is None
    assert spine.malformed[1] == 1 and spine.drop_counts()["malformed"] == 1 and spine.int_plain[1] == 0


def test_int_is_recognised_by_the_configured_dscp_only(fabric):
    """With the controller's INT DSCP at 0x0A (AF11), a transit switch pushes its hop onto frames
    marked 0x0A and forwards a valid-looking INT header marked CS4 as plain."""
    spine = fabric.pipelines["s1"]
    spine.state.apply(ent.modify(ent.value_set(spine.state.schema, "StarParser.int_dscp", [0x0A])))
    frame = int_frame(fabric)
    port, out = spine.ingress(bytes(frame), 1)
    assert isinstance(out, bytearray) and len(out) == len(frame)  # CS4 is ordinary traffic now: no hop
    assert spine.int_plain[1] == 0  # (int_dscp_plain counts frames marked with an INT DSCP only)
    set_tos(frame, 0x0A << 2)
    port, pending = spine.ingress(bytes(frame), 1)
    assert isinstance(pending, IntPending)
    assert len(parse(spine.int_engine.egress(pending, port, 0, fabric.now), 42).hops) == 2


def test_random_mutations_never_crash_and_every_packet_is_accounted_for(fabric):
    rng = random.Random(20261202)
    base = bytes(int_frame(fabric))
    spine = fabric.pipelines["s1"]
    forwarded = 0
    n = 10_000
    for _ in range(n):
        frame = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(14, len(frame))
            frame[at] = rng.randrange(256)
        if rng.random() < 0.2:
            frame = frame[:rng.randrange(0, len(frame))]
        result = spine.ingress(bytes(frame), 1, fabric.now)
        if result is None:
            continue
        port, out = result
        if isinstance(out, IntPending):
            out = spine.int_engine.egress(out, port, 0, fabric.now)
            assert int_length(out, 34 + 8) >= FIXED_BYTES + HOP_BYTES  # valid INT leaves valid
        forwarded += 1
    dropped = sum(spine.drop_counts().values())
    assert forwarded + dropped == n, (forwarded, spine.drops)
    assert spine.drop_counts()["malformed"] > 0 and forwarded > 0
