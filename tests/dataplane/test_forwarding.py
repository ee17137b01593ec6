"""starnet.p4 behaviour, written once and run against each target (soft switch, BMv2).

One switch, four ports, host ends in namespaces; programmed over P4Runtime:
  10.1.0.P/32 → port P;  10.2.0.0/16 → ECMP group over ports 2 and 3 (watch ports 2, 3);
  port 4 drains at 2 Mbit/s with an ECN threshold of 4 packets.
"""

from __future__ import annotations

import random
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from controller import entities as ent
from emulation.switchproc import bmv2_missing
from tests.checks import assert_within, wait_until
from tests.dataplane.harness import SwitchHarness
from wire.drops import DROP_COUNTER, by_reason
from wire.intmd import DSCP_INT, IntStack, parse
from wire.proto import p4r

pytestmark = [pytest.mark.root]

SMAC = "02:53:00:00:00:{:02x}"
NHOP_MAC = "02:00:00:00:0e:{:02x}"
MARK_DPORT = 9999
ECN_PORT, ECN_THRESHOLD = 4, 4
SELECTOR = "StarIngress.ecmp_selector"
ARRIVAL_TIMEOUT_S = 10.0  # a ceiling, not a wait: receive() returns as soon as the frames are in
WATCH_PORT_TIMEOUT_S = 5.0


@pytest.fixture(scope="module", params=["soft", "bmv2"])
def switch(request):
    if request.param == "bmv2" and bmv2_missing():
        pytest.skip(f"{' and '.join(bmv2_missing())} not found: BMv2 runs where p4lang's packages are installed")
    with SwitchHarness(request.param, ports=4, shapes={ECN_PORT: (2.0, 64)}) as h:
        program(h)
        yield h


def program(h: SwitchHarness) -> None:
    s = h.schema
    updates = []
    for port in range(1, 5):
        updates.append(ent.insert(ent.table_entry(s, "StarIngress.port_role", {"standard_metadata.ingress_port": port},
                                                  action_call=ent.action(s, "StarIngress.set_port_role", role=1))))
        updates.append(ent.insert(ent.member(s, SELECTOR, port, ent.action(
            s, "StarIngress.set_nhop", port=port, smac=SMAC.format(port), dmac=NHOP_MAC.format(port)))))
        updates.append(ent.insert(ent.table_entry(s, "StarIngress.ipv4_lpm",
                                                  {"hdr.ipv4.dst_addr": (f"10.1.0.{port}", 32)}, member_id=port)))
    updates.append(ent.insert(ent.group(s, SELECTOR, 1, [(2, 2), (3, 3)])))
    updates.append(ent.insert(ent.table_entry(s, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": ("10.2.0.0", 16)},
                                              group_id=1)))
    updates.append(ent.insert(ent.table_entry(
        s, "StarEgress.port_config", {"standard_metadata.egress_port": ECN_PORT},
        action_call=ent.action(s, "StarEgress.set_port_config", capacity_mbps=2, ecn_threshold_pkts=ECN_THRESHOLD))))
    updates.append(ent.modify(ent.value_set(s, "StarParser.int_dscp", [DSCP_INT])))  # as the controller does
    h.write(updates)


def udp(dst: str, sport: int = 1000, src: str = "10.1.0.1", ttl: int = 64, tos: int = 0, size: int = 100,
        payload: bytes = b"") -> bytes:
    header = Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1)) / IP(src=src, dst=dst, ttl=ttl, tos=tos) / \
        UDP(sport=sport, dport=MARK_DPORT)
    return bytes(header / (payload + b"\x00" * max(0, size - len(header) - len(payload))))


def int_udp(dst: str, size: int = 200) -> bytes:
    """A UDP frame carrying valid INT (no hops yet, all six remaining), marked CS4."""
    return udp(dst, sport=1500, tos=DSCP_INT << 2, size=size, payload=IntStack().pack())


def ours(frame: bytes) -> bool:
    return len(frame) >= 38 and frame[12:14] == b"\x08\x00" and frame[23] == 17 and \
        int.from_bytes(frame[36:38], "big") == MARK_DPORT


def counter(h: SwitchHarness, name: str, index: int) -> tuple[int, int]:
    return h.session.call(h.session.s.read_counter(name)).get(index, (0, 0))


def test_lpm_forwards_and_rewrites_macs_ttl_checksum(switch):
    switch.drain()
    switch.send(1, udp("10.1.0.2", ttl=9))
    (frame,) = switch.receive(2, ours)
    packet = Ether(frame)
    assert (packet.src, packet.dst) == (SMAC.format(2), NHOP_MAC.format(2))
    assert packet[IP].ttl == 8
    check = packet[IP].chksum
    del packet[IP].chksum
    assert IP(bytes(packet[IP])).chksum == check


def test_ttl_one_and_unrouted_are_dropped(switch):
    switch.drain()
    switch.send(1, udp("10.1.0.2", ttl=1))
    switch.send(1, udp("192.168.7.7"))
    assert switch.receive(2, ours, timeout_s=0.5) == []


def flows_by_port(switch: SwitchHarness, sports: range) -> dict[int, set[int]]:
    switch.drain()
    for sport in sports:
        switch.send(1, udp("10.2.0.9", sport=sport))
    seen: dict[int, set[int]] = {}
    for port, frames in switch.receive_many([2, 3], ours, count=len(sports)).items():
        for frame in frames:
            seen.setdefault(port, set()).add(int.from_bytes(frame[34:36], "big"))
    return seen


def test_ecmp_spreads_flows_and_keeps_each_flow_on_one_port(switch):
    sports = range(20000, 20064)
    first = flows_by_port(switch, sports)
    assert set(first) == {2, 3}, first
    assert first[2].isdisjoint(first[3])
    assert first[2] | first[3] == set(sports)
    assert flows_by_port(switch, sports) == first


def pin(h: SwitchHarness, sport: int, port: int, dst: str = "10.2.0.9"):
    """flow_pin: the UDP flow 10.1.0.1:sport → dst:MARK_DPORT to `port`."""
    return ent.table_entry(h.schema, "StarIngress.flow_pin",
                           {"hdr.ipv4.dst_addr": dst, "hdr.ipv4.src_addr": "10.1.0.1", "hdr.ipv4.protocol": 17,
                            "meta.l4_src_port": sport, "meta.l4_dst_port": MARK_DPORT},
                           action_call=ent.action(h.schema, "StarIngress.set_nhop", port=port, smac=SMAC.format(port),
                                                  dmac=NHOP_MAC.format(port)))


def test_a_pinned_flow_leaves_by_its_pin_and_the_others_keep_hashing(switch):
    """Path scheduling (issue "Path scheduling"): flow_pin overrides ECMP for the flows it names,
    only for them, and deleting the pins hands them back to the hash."""
    sports = range(22000, 22064)
    hashed = flows_by_port(switch, sports)
    assert set(hashed) == {2, 3}, hashed
    moved = sorted(hashed[2])[:8]
    pins = [pin(switch, sport, 3) for sport in moved]
    switch.write([ent.insert(p) for p in pins])
    try:
        now = flows_by_port(switch, sports)
        assert now[3] == hashed[3] | set(moved) and now[2] == hashed[2] - set(moved)
        query = p4r.Entity()
        query.table_entry.table_id = switch.schema.id_of("StarIngress.flow_pin")
        read = switch.session.call(switch.session.s.read([query]))
        assert len(read) == 8
    finally:
        switch.write([ent.delete(p) for p in pins])
    assert flows_by_port(switch, sports) == hashed


def test_flow_pin_holds_its_p4info_size_and_no_more(switch):
    size = switch.schema.table("StarIngress.flow_pin").size
    pins = [pin(switch, 30000 + i, 2) for i in range(size)]
    switch.write([ent.insert(p) for p in pins])
    try:
        with pytest.raises(Exception) as caught:
            switch.write([ent.insert(pin(switch, 30000 + size, 2))])
        assert "RESOURCE_EXHAUSTED" in str(caught.value)
    finally:
        switch.write([ent.delete(p) for p in pins])


def flowlet_gap(h: SwitchHarness, gap_us: int) -> p4r.Update:
    return ent.modify(ent.default_entry(h.schema, "StarIngress.flowlet_config",
                                        ent.action(h.schema, "StarIngress.set_flowlet_gap", gap_us=gap_us)))


def test_flowlets_of_one_flow_are_hashed_afresh_and_a_flowlet_stays_on_one_port(switch):
    """Mode flowlet (LetFlow): with a 20 ms gap, each burst of one UDP flow, 100 ms after the last,
    is a new flowlet: over 12 bursts the flow uses both ECMP ports, each burst one port only; with
    the gap at 0 (off), every burst takes the flow's one hashed port."""
    def bursts(sport: int) -> list[set[int]]:
        seen = []
        for _ in range(12):
            switch.drain()
            switch.send(1, udp("10.2.0.9", sport=sport), count=5)
            got = switch.receive_many([2, 3], ours, count=5)
            seen.append({port for port, frames in got.items() for _ in frames})
            time.sleep(0.1)  # the stimulus: a gap longer than the flowlet gap
        return seen

    switch.write([flowlet_gap(switch, 20_000)])
    try:
        on = bursts(23000)
    finally:
        switch.write([flowlet_gap(switch, 0)])
    assert all(len(ports) == 1 for ports in on), on  # a flowlet never splits
    assert set().union(*on) == {2, 3}, on
    off = bursts(23000)
    assert len(set().union(*off)) == 1, off


def test_member_whose_watch_port_is_down_gets_no_traffic(switch):
    sports = range(21000, 21064)
    switch.set_link(3, False)
    try:
        # The soft switch polls link state every 50 ms, BMv2's port monitor similarly: wait for
        # the member to leave (bounded), then check one more full round.
        moved = wait_until(lambda: set(flows_by_port(switch, sports)) == {2}, WATCH_PORT_TIMEOUT_S, 0)
        seen = flows_by_port(switch, sports)
    finally:
        switch.set_link(3, True)
    assert moved, f"flows still reach the down port 3 after {WATCH_PORT_TIMEOUT_S} s"
    assert set(seen) == {2} and seen[2] == set(sports)


def test_packet_out_leaves_by_the_named_port(switch):
    switch.drain()
    frame = udp("10.9.9.9", sport=4242)
    switch.session.call(switch.session.s.packet_out(frame, egress_port=3))
    (received,) = switch.receive(3, ours)
    assert received[:len(frame)] == frame


def test_probe_arrives_as_packet_in_with_ingress_port_and_reason(switch):
    probe = bytes(Ether(src="02:00:00:00:0d:02", dst="ff:ff:ff:ff:ff:ff", type=0x88B5) / (b"\x5a" * 46))
    switch.send(2, probe)
    packet = switch.session.packet_in()
    assert packet is not None, "no PacketIn within 3 s"
    fields = switch.session.s.packet_in_fields(packet)
    assert (fields["ingress_port"], fields["reason"]) == (2, 2)
    assert packet.payload[:len(probe)] == probe


def test_a_links_injected_loss_takes_its_probes_too(switch):
    """fault_inject on an ingress port alone (a link's loss) drops probes arriving there, counted
    as faults; probes on the other ports still reach the controller."""
    probe = bytes(Ether(src="02:00:00:00:0d:02", dst="ff:ff:ff:ff:ff:ff", type=0x88B5) / (b"\x5b" * 46))
    entry = ent.table_entry(switch.schema, "StarIngress.fault_inject", {"standard_metadata.ingress_port": (2, 0x1FF)},
                            action_call=ent.action(switch.schema, "StarIngress.fault_drop"), priority=10)
    switch.write([ent.insert(entry)])
    try:
        before = counter(switch, "StarIngress.fault_drops", 2)[0]
        switch.send(2, probe, count=3)
        switch.send(3, probe)
        packet = switch.session.packet_in()
        assert packet is not None, "no PacketIn within 3 s"
        assert switch.session.s.packet_in_fields(packet)["ingress_port"] == 3
        assert switch.session.packet_in(timeout_s=0.5) is None, "a probe through the lossy port reached the controller"
        assert counter(switch, "StarIngress.fault_drops", 2)[0] - before == 3
    finally:
        switch.write([ent.delete(entry)])


def test_ecn_marks_ect_traffic_above_the_queue_threshold(switch):
    switch.drain()
    # 40 frames of 1000 B at once into a 2 Mbit/s port: the queue builds well past 4 packets.
    switch.send(1, udp(f"10.1.0.{ECN_PORT}", tos=0x02, size=1000), count=40)
    frames = switch.receive(ECN_PORT, ours, count=40, timeout_s=ARRIVAL_TIMEOUT_S)
    ecn = [Ether(f)[IP].tos & 3 for f in frames]
    assert len(ecn) == 40, f"{len(ecn)} of 40 frames arrived"
    # The first THRESHOLD frames found fewer than THRESHOLD ahead of them whatever the timing; the
    # 40 frames leave the sender within a few ms and drain in 160 ms, so most find a queue (half
    # still do if the sender stalls 60 ms).
    assert ecn[:ECN_THRESHOLD] == [2] * ECN_THRESHOLD, ecn
    assert ecn.count(3) >= 20, ecn
    switch.send(1, udp(f"10.1.0.{ECN_PORT}", tos=0x00, size=1000), count=20)
    plain = switch.receive(ECN_PORT, ours, count=20, timeout_s=ARRIVAL_TIMEOUT_S)
    assert len(plain) == 20, f"{len(plain)} of 20 non-ECT frames arrived"
    assert all(Ether(f)[IP].tos & 3 == 0 for f in plain), "a non-ECT frame was marked"


def fault_entry(h: SwitchHarness, dst: str, action_call):
    return ent.table_entry(h.schema, "StarIngress.fault_inject",
                           {"standard_metadata.ingress_port": (1, 0x1FF), "hdr.ipv4.dst_addr": (dst, 0xFFFFFFFF)},
                           action_call=action_call, priority=10)


def test_a_watched_flows_first_data_packet_starts_int(switch):
    """int_flow_seen: with sampling at 1 in 2^15, a watched flow's first packet with payload leaves
    with INT (DSCP 0x20); its next packets (almost) never; a header-only datagram is no data."""
    s = switch.schema
    entry = ent.table_entry(s, "StarIngress.int_source", {"hdr.ipv4.protocol": (17, 0xFF)},
                            action_call=ent.action(s, "StarIngress.int_watch", sample_log2=15), priority=1)
    switch.write([ent.insert(entry)])

    def int_marks(frame: bytes, count: int = 1) -> list[bool]:
        switch.drain()
        switch.send(1, frame, count=count)
        return [f[15] >> 2 == 0x20 for f in switch.receive(2, ours, count=count)]

    try:
        assert int_marks(udp("10.1.0.2", sport=31000)) == [True]
        assert sum(int_marks(udp("10.1.0.2", sport=31000), count=30)) <= 1
        header_only = bytes(Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1)) / IP(src="10.1.0.1", dst="10.1.0.2")
                            / UDP(sport=31001, dport=MARK_DPORT))
        assert int_marks(header_only) == [False]
        assert int_marks(udp("10.1.0.2", sport=31001)) == [True]  # its first data
    finally:
        switch.write([ent.delete(entry)])


def test_fault_drop_drops_everything_it_matches_and_counts(switch):
    entry = fault_entry(switch, "10.1.0.2", ent.action(switch.schema, "StarIngress.fault_drop"))
    switch.write([ent.insert(entry)])
    try:
        before = counter(switch, "StarIngress.fault_drops", 1)[0]
        rx_before = counter(switch, "StarIngress.port_rx", 1)[0]
        switch.drain()
        switch.send(1, udp("10.1.0.2"), count=50)
        switch.send(1, udp("10.1.0.3"), count=5)
        assert switch.receive(2, ours, timeout_s=0.7) == []
        assert len(switch.receive(3, ours, count=5)) == 5
        assert counter(switch, "StarIngress.fault_drops", 1)[0] - before == 50
        # lost on the link: port_rx never saw them (its far end's port_tx did: that is the loss)
        assert counter(switch, "StarIngress.port_rx", 1)[0] - rx_before == 5
    finally:
        switch.write([ent.delete(entry)])


def test_fault_drop_probability_is_within_statistical_bounds(switch):
    entry = fault_entry(switch, "10.1.0.2", ent.action(switch.schema, "StarIngress.fault_drop_prob",
                                                       prob_u16=16384))  # 25 %
    switch.write([ent.insert(entry)])
    try:
        switch.drain()
        dropped_before = counter(switch, "StarIngress.fault_drops", 1)[0]
        tx_before = counter(switch, "StarEgress.port_tx", 2)[0]
        sent = 800
        for i in range(sent):
            switch.send(1, udp("10.1.0.2", sport=30000 + i % 100))
        handled = wait_until(lambda: counter(switch, "StarIngress.fault_drops", 1)[0] - dropped_before
                             + counter(switch, "StarEgress.port_tx", 2)[0] - tx_before >= sent, ARRIVAL_TIMEOUT_S)
        forwarded = counter(switch, "StarEgress.port_tx", 2)[0] - tx_before
        delivered = len(switch.receive(2, ours, count=forwarded, timeout_s=ARRIVAL_TIMEOUT_S))
    finally:
        switch.write([ent.delete(entry)])
    assert handled, "the switch did not count all 800 frames as dropped or forwarded"
    assert delivered == forwarded, f"{forwarded} counted out of port 2, {delivered} arrived"
    # Binomial(800, 0.75): mean 600, sd 12.2; ±5 sd.
    assert_within(delivered, 600, 61, what="frames delivered of 800 at 25% drop")


def test_port_counters_count_what_passed(switch):
    rx_before = counter(switch, "StarIngress.port_rx", 1)[0]
    tx_before = counter(switch, "StarEgress.port_tx", 2)
    switch.drain()
    switch.send(1, udp("10.1.0.2", size=200), count=30)
    assert len(switch.receive(2, ours, count=30)) == 30
    rx_after = counter(switch, "StarIngress.port_rx", 1)[0]
    tx_after = counter(switch, "StarEgress.port_tx", 2)
    assert rx_after - rx_before >= 30
    assert tx_after[0] - tx_before[0] == 30
    assert tx_after[1] - tx_before[1] == 30 * 200


def test_malformed_ipv4_is_counted_and_dropped(switch):
    before = counter(switch, "StarIngress.malformed", 1)[0]
    truncated = bytes(Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1), type=0x0800)) + b"\x45\x00\x00\x14"
    switch.send(1, truncated + b"\x00" * 6)  # 24 B: shorter than an IPv4 header
    switch.send(1, udp("10.1.0.2"))
    assert len(switch.receive(2, ours)) == 1
    assert counter(switch, "StarIngress.malformed", 1)[0] - before == 1


def test_short_tcp_claiming_int_is_dropped_and_the_next_frame_flows(switch):
    """The 40-byte frame of issue "Robustness" (DSCP 0x20, TCP, 6 bytes of TCP) used to end the
    soft switch's data plane: it is dropped and counted as malformed; the switch goes on."""
    before = counter(switch, "StarIngress.malformed", 1)[0]
    ip = IP(src="10.1.0.1", dst="10.1.0.2", tos=0x80, proto=6, ttl=64)
    ip.len = 26
    killer = bytes(Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1)) / ip) + b"\x00" * 6
    assert len(killer) == 40
    switch.drain()
    switch.send(1, killer)
    switch.send(1, udp("10.1.0.2"))
    assert len(switch.receive(2, ours)) == 1, "the valid frame after the short one did not arrive"
    assert switch.switch.running
    if switch.target == "soft":  # BMv2's parser rejects it before the malformed counter
        assert counter(switch, "StarIngress.malformed", 1)[0] - before == 1


def dropped(h: SwitchHarness, reason: str) -> int:
    return by_reason(h.session.call(h.session.s.read_counter(DROP_COUNTER))).get(reason, (0, 0))[0]


def test_a_vlan_tagged_frame_is_dropped_as_non_ipv4_as_starnet_p4_says(switch):
    """starnet.p4 parses no 802.1Q, so a tagged frame is a non_ipv4 drop: BMv2 sees the tag through
    libpcap. Where the kernel hands a packet socket the frame with its tag taken off, the soft switch
    forwarded all 100 of 100 VLAN-10 frames untagged until it kept them apart (a BPF filter)."""
    before, rx_before = dropped(switch, "non_ipv4"), counter(switch, "StarIngress.port_rx", 1)[0]
    tagged = bytes(Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1)) / Dot1Q(vlan=10)) + udp("10.1.0.2")[14:]
    switch.drain()
    switch.send(1, tagged, count=100)
    switch.send(1, udp("10.1.0.2"))  # after them: once it is through, so are they
    assert len(switch.receive(2, ours, count=2, timeout_s=1.0)) == 1, "a tagged frame left port 2"
    assert wait_until(lambda: dropped(switch, "non_ipv4") - before == 100, 5.0), dropped(switch, "non_ipv4") - before
    assert counter(switch, "StarIngress.port_rx", 1)[0] - rx_before == 101


def test_cs4_traffic_without_int_is_forwarded_as_plain_and_counted(switch):
    """Issue "Edges": ordinary traffic marked CS4 (the INT DSCP) with no INT header behind its UDP
    header, or too little payload for one, leaves unchanged (but for TTL and MACs) and is counted in
    int_dscp_plain; it used to be dropped as malformed."""
    plain0, malformed0 = counter(switch, "StarIngress.int_dscp_plain", 1), counter(switch, "StarIngress.malformed", 1)
    frames = [udp("10.1.0.2", tos=0x80, size=300, payload=bytes(range(200))), udp("10.1.0.2", tos=0x81, size=50)]
    switch.drain()
    for frame in frames:
        switch.send(1, frame, count=10)
    got = switch.receive(2, ours, count=20)
    assert len(got) == 20
    assert sorted({(f[15], len(f), f[42:]) for f in got}) == sorted({(f[15], len(f), f[42:]) for f in frames})
    plain = counter(switch, "StarIngress.int_dscp_plain", 1)
    assert plain[0] - plain0[0] == 20 and plain[1] - plain0[1] == 10 * 300 + 10 * 50
    assert counter(switch, "StarIngress.malformed", 1) == malformed0


def test_a_valid_int_frame_gets_this_switchs_hop(switch):
    """Real INT (a valid shim and MD header) marked CS4 is transit INT: the switch pushes its hop."""
    switch.drain()
    switch.send(1, int_udp("10.1.0.2"), count=3)
    got = switch.receive(2, ours, count=3)
    assert len(got) == 3
    for frame in got:
        stack = parse(frame, 42)
        assert len(stack.hops) == 1 and stack.remaining_hop_cnt == 5
        assert stack.hops[0].ingress_port == 1 and stack.hops[0].egress_port == 2


# ---- frame accounting ---------------------------------------------------------------------------
FLOOD_FRAMES = 100_000
FLOOD_BURST = 2_000  # sent, then waited for at the switch's port_rx: nothing lost before the switch
ACCOUNTING_TIMEOUT_S = 30.0


def flood_kinds() -> list[tuple[int, bytes]]:
    """(ingress port, frame) of every kind in the mixed flood, each named by what should happen."""
    mac = Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1))
    short_ip = IP(src="10.1.0.1", dst="10.1.0.2", tos=0x80, proto=6, ttl=64)
    short_ip.len = 26
    return [
        (1, udp("10.1.0.2", size=100)),                       # forwarded to port 2
        (1, udp("10.1.0.2", tos=0x80, size=200)),             # CS4 without INT: forwarded as plain
        (1, int_udp("10.1.0.2")),                             # INT: forwarded with this switch's hop
        (1, udp("10.2.0.7", sport=4242, size=700)),          # ECMP over ports 2, 3
        (1, udp("10.1.0.4", size=1400)),                      # port 4 at 2 Mbit/s: mostly queue_full
        (1, udp("10.1.0.3", size=300)),                       # fault_inject drops 10.1.0.3 from port 1
        (1, udp("192.168.7.7")),                              # no_route
        (1, udp("10.1.0.2", ttl=1)),                          # ttl_expired
        (1, bytes(Ether(src="02:00:00:00:0d:01", dst="ff:ff:ff:ff:ff:ff") / ARP())),  # non_ipv4
        (1, bytes(Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1)) / Dot1Q(vlan=10)) + udp("10.1.0.2")[14:]),  # too
        (1, bytes(mac / short_ip) + b"\x00" * 6),             # the 40-byte INT/TCP frame: malformed
        (1, bytes(Ether(src="02:00:00:00:0d:01", dst=SMAC.format(1), type=0x0800)) + b"\x45" + b"\x00" * 9),
        (3, bytes(Ether(src="02:00:00:00:0d:03", dst="ff:ff:ff:ff:ff:ff", type=0x88B5) / (b"\x5a" * 46))),  # punted
    ]


def totals(h: SwitchHarness) -> tuple[int, int, dict[str, int]]:
    """(frames in, tx packets, drops by reason) summed over the ports, all read over P4Runtime. Frames
    in = port_rx + fault drops: injected loss is the link's, lost before port_rx counts."""
    rx = sum(p for p, _ in h.session.call(h.session.s.read_counter("StarIngress.port_rx")).values())
    tx = sum(p for p, _ in h.session.call(h.session.s.read_counter("StarEgress.port_tx")).values())
    cells = h.session.call(h.session.s.read_counter(DROP_COUNTER))
    drops = {reason: packets for reason, (packets, _) in by_reason(cells).items()}
    return rx + drops.get("fault", 0), tx, drops


def take_packet_ins(h: SwitchHarness) -> int:
    """PacketIns the switch delivered since the last call (queued here or dropped by the client)."""
    async def drain() -> int:
        n = 0
        while not h.session.s.packet_ins.empty():
            h.session.s.packet_ins.get_nowait()
            n += 1
        n += h.session.s.packet_in_drops
        h.session.s.packet_in_drops = 0
        return n
    return h.session.call(drain())


def test_every_frame_of_a_mixed_flood_is_forwarded_punted_or_dropped_for_a_counted_reason(switch):
    """rx = tx + punted + every drop reason over 100,000 frames of thirteen kinds, read over P4Runtime."""
    if switch.target != "soft":
        pytest.skip("BMv2's traffic manager drops (queue full) are not in the P4 counter drop_reason")
    fault = fault_entry(switch, "10.1.0.3", ent.action(switch.schema, "StarIngress.fault_drop"))
    switch.write([ent.insert(fault)])
    try:
        take_packet_ins(switch)
        rx0, tx0, drops0 = totals(switch)
        plain0 = counter(switch, "StarIngress.int_dscp_plain", 1)[0]
        kinds = flood_kinds()
        rng = random.Random(18)
        sent = 0
        while sent < FLOOD_FRAMES:
            for _ in range(FLOOD_BURST):
                port, frame = kinds[rng.randrange(len(kinds))]
                switch.send(port, frame)
            sent += FLOOD_BURST
            assert wait_until(lambda n=sent: totals(switch)[0] - rx0 >= n, ACCOUNTING_TIMEOUT_S, interval_s=0.02), \
                f"the switch counted {totals(switch)[0] - rx0} of {sent} frames in"
        switch.drain()
        punted = 0

        def balanced() -> bool:
            nonlocal punted
            punted += take_packet_ins(switch)
            rx, tx, drops = totals(switch)
            dropped = sum(drops.values()) - sum(drops0.values())
            return rx - rx0 == tx - tx0 + punted + dropped
        balanced_in_time = wait_until(balanced, ACCOUNTING_TIMEOUT_S)
        rx, tx, drops = totals(switch)
        grew = {reason: drops[reason] - drops0[reason] for reason in drops}
        assert balanced_in_time, (f"unaccounted: rx {rx - rx0} != tx {tx - tx0} + punted {punted} + "
                                  f"drops {sum(grew.values())} {grew}")
        assert rx - rx0 == FLOOD_FRAMES, f"{rx - rx0} frames counted in, {FLOOD_FRAMES} sent"
        # Every kind made its mark: each expected reason grew, the rest (no live member, send error)
        # did not, and probes reached the client.
        for reason in ("malformed", "non_ipv4", "ttl_expired", "no_route", "fault", "queue_full"):
            assert grew[reason] > 0, f"no {reason} drops in the flood: {grew}"
        assert grew["no_live_member"] == grew["send_error"] == 0, grew
        assert punted + grew["no_controller"] > 0
        assert tx - tx0 > 0
        assert counter(switch, "StarIngress.int_dscp_plain", 1)[0] > plain0  # CS4 frames passed as plain
    finally:
        switch.write([ent.delete(fault)])
