"""The ingress/egress pipeline of starnet.p4, executed in Python.

Table, action and counter names come from the P4Info through RuntimeState. Every committed
P4Runtime write is compiled, on the thread that applied it, into a PipelineSnapshot: tables and
the selector resolved, action ids resolved once, the egress config (ECN thresholds, capacities,
node id, report size), and a per-flow cache (key: ingress port, IPv4 protocol, addresses and L4
ports) of full table walks, so the common packet costs one dict lookup. The snapshot is published
by one reference assignment; a frame reads it once and walks, caches and forwards with that one,
so a result computed from an older state lands in that snapshot's cache, which is dropped with
it. A port status change publishes a copy with an empty cache. Malformed frames are counted and
dropped, never fatal.
"""

from __future__ import annotations

import random
import struct
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from softswitch.inband import EgressConfig, IntEngine, IntPending, flow_ids
from softswitch.runtime_state import RuntimeState
from softswitch.tables import ActionCall, ActionProfileState, TableState
from wire.cpu import ETHERTYPE_PROBE, REASON_PROBE, REPORT_FLOW_SLOTS, REPORT_SESSION, REPORT_TRUNCATE_BYTES, ROLE_HOST
from wire.drops import DROP_COUNTER, DROP_INDEX, DROP_REASONS
from wire.intmd import DSCP_INT, IntFormatError, insert_source_header, int_offset, set_ipv4_word

IPV4_LPM = "StarIngress.ipv4_lpm"
FLOW_PIN = "StarIngress.flow_pin"
FLOWLET_CONFIG = "StarIngress.flowlet_config"
ECMP_SELECTOR = "StarIngress.ecmp_selector"
PORT_ROLE = "StarIngress.port_role"
FAULT_INJECT = "StarIngress.fault_inject"
PORT_CONFIG = "StarEgress.port_config"
INT_SOURCE = "StarIngress.int_source"
INT_SINK = "StarIngress.int_sink"
INT_NODE = "StarEgress.int_node"
PORT_RX = "StarIngress.port_rx"
PORT_TX = "StarEgress.port_tx"
FAULT_DROPS = "StarIngress.fault_drops"
MALFORMED = "StarIngress.malformed"
INT_DSCP_PLAIN = "StarIngress.int_dscp_plain"
INT_DSCP_SET = "StarParser.int_dscp"
SET_NHOP = "StarIngress.set_nhop"
INT_WATCH = "StarIngress.int_watch"
FAULT_DROP = "StarIngress.fault_drop"
FAULT_DROP_PROB = "StarIngress.fault_drop_prob"
SET_PORT_CONFIG = "StarEgress.set_port_config"
SET_NODE_ID = "StarEgress.set_node_id"
SET_FLOWLET_GAP = "StarIngress.set_flowlet_gap"

_PROBE = ETHERTYPE_PROBE.to_bytes(2, "big")

_FIVE_TUPLE = struct.Struct("!IIBHH")
_IPV4_ADDRS = struct.Struct("!II")
_L4_PORTS = struct.Struct("!HH")


def mac_bytes(value: int) -> bytes:
    return value.to_bytes(6, "big")


# Cached result of the ingress tables for one flow: (egress port, new dst+src MAC (12 bytes),
# drop probability, INT sample_log2 or -1 when not watched, egress port is an INT sink), or
# (DROPPED, reason, 0.0, -1, False). Plain tuples: the hot path unpacks them.
DROPPED = -1
TableResult = tuple[int, bytes | str, float, int, bool]  # port, MACs or drop reason, drop probability, sample, sink
FlowResult = tuple[int, bytes | str, float, int, bool, tuple[int, int]]  # ... and the flow's (slot, signature)

FLOW_CACHE_MAX = 1 << 16  # flows; a flood of new 5-tuples empties the cache instead of growing it
_FAST_IPV4 = b"\x08\x00\x45"  # EtherType IPv4, version 4 with a 20-byte header


@dataclass(frozen=True, eq=False)
class PipelineSnapshot:
    """One committed state as the data plane uses it (see the module docstring)."""

    generation: int
    set_nhop_id: int
    int_watch_id: int
    fault_drop_id: int
    fault_drop_prob_id: int
    ipv4_lpm: TableState
    port_role: TableState
    fault_inject: TableState
    int_source: TableState
    int_sink: TableState
    flow_pin: TableState
    selector: ActionProfileState
    egress: EgressConfig
    int_tos: bytes = bytes(256)  # per IPv4 TOS byte: 1 when its DSCP is in the value set int_dscp
    flowlet_gap_s: float = 0.0  # flowlet_config's gap (0: flowlet switching off)
    flow_cache: dict[tuple, FlowResult] = field(default_factory=dict)


def fault_drop_prob(snap: PipelineSnapshot, in_port: int, src: int, dst: int) -> float:
    """The share of this frame's flow fault_inject drops (1.0: fault_drop, every frame)."""
    fault = snap.fault_inject.lookup((in_port, src, dst))
    if fault is None or fault.action is None:
        return 0.0
    if fault.action.action_id == snap.fault_drop_id:
        return 1.0
    if fault.action.action_id == snap.fault_drop_prob_id:
        return fault.action.args[0] / 65536.0
    return 0.0


@dataclass
class Pipeline:
    state: RuntimeState
    port_up: dict[int, bool] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.counter_sync: list = []
        # Where punted frames go (frame, ingress port, reason): the P4Runtime PacketIn stream.
        self.packet_in: Callable[[bytes, int, int], bool | None] | None = None
        self.held_probes: list[tuple[bytes, int]] | None = None  # probes the data plane punts later, together
        self._generation = 0
        self.int_engine = IntEngine()
        self.int_engine.to_cpu = self.clone_to_cpu
        # starnet.p4's register int_flow_seen: per flow slot, the signature of the last watched
        # flow that carried payload through this source (0: none).
        self.int_flow_seen = [0] * REPORT_FLOW_SLOTS
        # starnet.p4's registers flowlet_last_us and flowlet_ids (the monotonic clock here).
        self.flowlet_last = [float("-inf")] * REPORT_FLOW_SLOTS
        self.flowlet_ids = [0] * REPORT_FLOW_SLOTS
        # Frames fault_inject dropped per ingress port, since start: in starnet.p4 they are lost
        # before port_rx counts (a link's loss), so the data plane takes them off its rx counts.
        self.lost_on_link: dict[int, list[int]] = {}  # port → [packets, bytes]
        self.bind(self.state)

    def bind(self, state: RuntimeState) -> None:
        """Follow a (new) runtime state: resolve its objects now and again whenever it changes."""
        self.state = state
        if self._state_changed not in state.listeners:
            state.listeners.append(self._state_changed)
        for sync in self.counter_sync:
            if sync not in state.counter_sync:
                state.counter_sync.append(sync)
        self._state_changed()

    def add_counter_sync(self, sync: Callable[[], None]) -> None:
        """Register the data plane's counter flush with this and every later runtime state."""
        self.counter_sync.append(sync)
        self.state.counter_sync.append(sync)

    def _state_changed(self) -> None:
        """Compile the committed state into a new snapshot (its objects resolved by name: a clear()
        replaces them) and publish it, with an empty flow cache; the counters are re-resolved."""
        state = self.state
        # Action ids resolved once per state, so a cache miss compares integers, not names.
        ids = state.schema.id_of
        set_port_config_id = ids(SET_PORT_CONFIG)
        port_config = state.table_by_name(PORT_CONFIG)
        rx = state.counter_by_name(PORT_RX)
        tx = state.counter_by_name(PORT_TX)
        self.rx_packets, self.rx_bytes = rx.packets, rx.bytes
        self.tx_packets, self.tx_bytes = tx.packets, tx.bytes
        fault_drops = state.counter_by_name(FAULT_DROPS)
        self.fault_drops, self.fault_drop_bytes = fault_drops.packets, fault_drops.bytes
        malformed = state.counter_by_name(MALFORMED)
        self.malformed, self.malformed_bytes = malformed.packets, malformed.bytes
        plain = state.counter_by_name(INT_DSCP_PLAIN)
        self.int_plain, self.int_plain_bytes = plain.packets, plain.bytes
        int_dscps = state.value_sets.by_name(INT_DSCP_SET)
        by_reason = state.counter_by_name(DROP_COUNTER)
        self.reason_packets, self.reason_bytes = by_reason.packets, by_reason.bytes
        port_configs = {values[0]: entry.action.args for values, entry in port_config.exact_index.items()
                        if entry.action is not None and entry.action.action_id == set_port_config_id}
        node = state.table_by_name(INT_NODE).default_action
        flowlet = state.table_by_name(FLOWLET_CONFIG).default_action
        session = state.clone_sessions.get(REPORT_SESSION)
        egress = EgressConfig(
            node_id=node.args[0] if node.action_id == ids(SET_NODE_ID) else 0,
            int_dscp=node.args[1] if node.action_id == ids(SET_NODE_ID) else DSCP_INT,
            capacity_mbps={port: args[0] for port, args in port_configs.items()},
            ecn_thresholds={port: args[1] for port, args in port_configs.items()},
            report_bytes=None if session is None else min(REPORT_TRUNCATE_BYTES,
                                                          session.packet_length_bytes or REPORT_TRUNCATE_BYTES))
        self._generation += 1
        snapshot = PipelineSnapshot(
            self._generation, ids(SET_NHOP), ids(INT_WATCH), ids(FAULT_DROP), ids(FAULT_DROP_PROB),
            state.table_by_name(IPV4_LPM), state.table_by_name(PORT_ROLE), state.table_by_name(FAULT_INJECT),
            state.table_by_name(INT_SOURCE), state.table_by_name(INT_SINK), state.table_by_name(FLOW_PIN),
            state.profile_by_name(ECMP_SELECTOR),
            egress, bytes(int(tos >> 2 in int_dscps) for tos in range(256)),
            flowlet.args[0] / 1e6 if flowlet.action_id == ids(SET_FLOWLET_GAP) else 0.0)
        self.int_engine.config = egress
        self.snapshot = snapshot  # published: the next frame uses it

    def invalidate(self) -> None:
        """Publish the same state with an empty flow cache (a port went up or down)."""
        self.snapshot = replace(self.snapshot, flow_cache={})

    @property
    def flow_cache(self) -> dict[tuple, FlowResult]:
        return self.snapshot.flow_cache

    @property
    def config_generation(self) -> int:
        """Changes with every committed state (not with a port status change)."""
        return self.snapshot.generation

    @property
    def ecn_thresholds(self) -> Mapping[int, int]:
        return self.snapshot.egress.ecn_thresholds

    def set_port_up(self, port: int, up: bool) -> None:
        if self.port_up.get(port) != up:
            self.port_up[port] = up
            self.invalidate()

    # ---- per packet ---------------------------------------------------------------------------
    # Port counters (port_rx, port_tx) are kept per batch by the data plane, not per packet here.
    def ingress(self, frame: bytes, in_port: int,
                now: float | None = None) -> tuple[int, bytearray | IntPending] | None:
        """Run one frame through ingress; return (egress port, rewritten frame) or None (dropped).

        now: monotonic time the frame entered (INT hop latency is measured from it); default: the clock."""
        if frame[12:15] == _FAST_IPV4 and len(frame) >= 38:
            proto = frame[23]
            key = (in_port, proto, frame[26:38] if proto == 6 or proto == 17 else frame[26:34])
        else:
            unusual = self._unusual_key(frame, in_port)
            if unusual is None:
                return None
            key = unusual
        # In starnet.p4's order: fault_inject (the link's loss, before anything else), TTL, ipv4_lpm.
        ttl = frame[22]
        # The snapshot in force as this frame is handled: a write that lands during the walk below
        # publishes a new one, so this result goes into the old snapshot's cache, dropped with it,
        # and no later frame is forwarded by it.
        snap = self.snapshot
        cache = snap.flow_cache
        result = cache.get(key)
        if result is None:
            if len(cache) >= FLOW_CACHE_MAX:
                cache.clear()
            ids = flow_ids(key[2], key[1])
            result = cache[key] = (*self.walk_tables(in_port, key[1], key[2][:8], key[2][8:], snap,
                                                     self.flowlet_ids[ids[0]] if snap.flowlet_gap_s else 0), ids)
        if snap.flowlet_gap_s and (key[1] == 6 or key[1] == 17):
            result = self._flowlet(key, result, in_port, snap, time.monotonic() if now is None else now)
        port, macs, drop_prob, sample_log2, sink, flow = result
        if drop_prob and self.rng.random() < drop_prob:
            self.count_drop("fault", in_port, len(frame))
            return None
        if ttl <= 1 and not (port == DROPPED and macs == "fault"):
            self.count_drop("ttl_expired", in_port, len(frame))
            return None
        if port == DROPPED:
            self.count_drop(macs, in_port, len(frame))  # type: ignore[arg-type]
            return None
        out = bytearray(frame)
        out[0:12] = macs  # type: ignore[assignment]
        out[22] = ttl - 1
        # RFC 1624 incremental update for TTL-1, as Linux ip_decrease_ttl does it: set_ipv4_word's
        # arithmetic for the one constant change every routed frame gets, inlined (the hot path).
        check = ((out[24] << 8) | out[25]) + 0x0100
        check = (check + (check >> 16)) & 0xFFFF
        out[24] = check >> 8
        out[25] = check & 0xFF
        if snap.int_tos[frame[15]] or sample_log2 >= 0:  # marked as INT, or a watched flow: maybe INT
            return self._int_ingress(out, frame, in_port, port, sample_log2, sink, key[1], flow, snap,
                                     time.monotonic() if now is None else now)
        return port, out

    def _int_ingress(self, out: bytearray, frame: bytes, in_port: int, port: int, sample_log2: int, sink: bool,
                     proto: int, flow: tuple[int, int], snap: PipelineSnapshot,
                     now: float) -> tuple[int, bytearray | IntPending] | None:
        if (proto != 6 and proto != 17) or frame[14] != 0x45:
            return port, out  # INT rides on TCP/UDP without IPv4 options only
        if snap.int_tos[frame[15]]:
            try:
                int_off = int_offset(out, proto)
            except IntFormatError:
                self.count_drop("malformed", in_port, len(out))
                return None
            if int_off is not None:
                return port, IntPending(out, in_port, int_off, sink, now, flow[0])
            # Foreign traffic with the INT DSCP (starnet.p4's int_dscp_plain): plain from here on.
            if in_port < len(self.int_plain):
                self.int_plain[in_port] += 1
                self.int_plain_bytes[in_port] += len(frame)
        if sample_log2 < 0:
            return port, out
        # The TCP/UDP header (as wire.intmd.l4_header_length, inline: this runs for every packet of
        # a watched flow); without a whole one the P4 source's hdr.tcp/udp is not valid.
        if proto == 17:
            l4_len = 8
        elif len(frame) >= 54 and frame[46] >= 0x50:
            l4_len = (frame[46] >> 4) * 4
        else:
            return port, out
        if len(frame) < 34 + l4_len:
            return port, out
        # INT rides on payload: a packet without any (a pure TCP ACK) never starts it — the
        # reports of ACK flows were half of all reports, telling only what data packets tell.
        # A new flow's first data packet (its flow's signature is not in its slot, then put there:
        # starnet.p4's int_flow_seen), and then one data packet in 2^sample_log2, start INT here.
        if (frame[16] << 8 | frame[17]) <= 20 + l4_len:
            return port, out
        slot, signature = flow
        if self.int_flow_seen[slot] != signature:
            self.int_flow_seen[slot] = signature
        elif sample_log2 and self.rng.getrandbits(16) & ((1 << sample_log2) - 1):
            return port, out
        int_off = 34 + l4_len
        if sink:  # source and sink here: the frame leaves without INT; a due report gets it (inband.py)
            return port, IntPending(out, in_port, int_off, sink, now, slot, True)
        return port, IntPending(insert_source_header(out, int_off, snap.egress.int_dscp), in_port, int_off, sink,
                                     now, slot)

    def _flowlet(self, key: tuple, result: FlowResult, in_port: int, snap: PipelineSnapshot,
                 now: float) -> FlowResult:
        """starnet.p4's flowlet switching: a packet more than the gap after its flow slot's last
        starts a new flowlet, walked (and cached) with the new flowlet number in the ECMP hash."""
        slot = result[5][0]
        last, self.flowlet_last[slot] = self.flowlet_last[slot], now
        if now - last <= snap.flowlet_gap_s:
            return result
        flowlet = self.flowlet_ids[slot] = (self.flowlet_ids[slot] + 1) & 0xFFFF
        snap.flow_cache[key] = result = (*self.walk_tables(in_port, key[1], key[2][:8], key[2][8:], snap, flowlet),
                                         result[5])
        return result

    def _unusual_key(self, frame: bytes, in_port: int) -> tuple[int, int, bytes] | None:
        """Flow key of a frame off the fast path (IPv4 options, short frames); None if dropped."""
        n = len(frame)
        if n < 14:
            self.count_drop("malformed", in_port, n)
            return None
        if frame[12:14] != b"\x08\x00":  # no IPv4: fault_inject first (IPv4 fields read 0), as in starnet.p4
            drop_prob = fault_drop_prob(self.snapshot, in_port, 0, 0)
            if drop_prob >= 1.0 or (drop_prob and self.rng.random() < drop_prob):
                self.count_drop("fault", in_port, n)
            elif frame[12:14] == _PROBE:
                if self.held_probes is None:
                    self.to_cpu(frame, in_port, REASON_PROBE)
                else:
                    self.held_probes.append((bytes(frame), in_port))
            else:
                self.count_drop("non_ipv4", in_port, n)
            return None
        vihl = frame[14] if n > 14 else 0
        ihl = (vihl & 0x0F) * 4
        if n < 34 or vihl >> 4 != 4 or ihl < 20 or n < 14 + ihl:
            self.count_drop("malformed", in_port, n)
            return None
        proto = frame[23]
        l4 = 14 + ihl
        if (proto == 6 or proto == 17) and n >= l4 + 4:
            return in_port, proto, frame[26:34] + frame[l4:l4 + 4]
        return in_port, proto, frame[26:34]

    def count_drop(self, reason: str, in_port: int, nbytes: int) -> None:
        """Count a dropped frame: its reason (the P4 counter drop_reason, the one place drops are
        kept) and, for fault and malformed, the per-port counter of that name."""
        index = DROP_INDEX[reason]
        self.reason_packets[index] += 1
        self.reason_bytes[index] += nbytes
        if reason == "fault":
            lost = self.lost_on_link.setdefault(in_port, [0, 0])
            lost[0] += 1
            lost[1] += nbytes
        if reason == "fault" and in_port < len(self.fault_drops):
            self.fault_drops[in_port] += 1
            self.fault_drop_bytes[in_port] += nbytes
        elif reason == "malformed" and in_port < len(self.malformed):
            self.malformed[in_port] += 1
            self.malformed_bytes[in_port] += nbytes

    def drop_counts(self) -> dict[str, int]:
        """Frames dropped per reason (wire/drops.py order), as the counter drop_reason holds them
        (queue_full and send_error once the data plane has folded its queues' drops in)."""
        return dict(zip(DROP_REASONS, self.reason_packets, strict=False))

    def to_cpu(self, frame: bytes | bytearray, in_port: int, reason: int) -> None:
        """Punt to the controller; a frame no controller takes (none connected, no primary, its
        stream full) is counted as dropped `no_controller`, never lost from the accounting."""
        if self.packet_in is None or self.packet_in(bytes(frame), in_port, reason) is False:
            self.count_drop("no_controller", in_port, len(frame))

    def clone_to_cpu(self, frame: bytes | bytearray, in_port: int, reason: int) -> None:
        """A clone to the controller (an INT report): not a frame the switch received, so one no
        controller takes is counted apart (int_engine.reports_lost), never as a drop of a received
        frame — rx = tx + punted + drops balances to the frame (BMv2's PI discards such a clone
        uncounted)."""
        if self.packet_in is None or self.packet_in(bytes(frame), in_port, reason) is False:
            self.int_engine.reports_lost += 1

    # ---- the table walk (cache miss) ---------------------------------------------------------
    def walk_tables(self, in_port: int, proto: int, addrs: bytes, l4_ports: bytes,
                    snap: PipelineSnapshot | None = None, flowlet: int = 0) -> TableResult:
        """The ingress tables for one flow, in `snap` (default: the snapshot in force); `flowlet`:
        its flowlet number, an ECMP hash key (0: flowlet switching off)."""
        snap = snap or self.snapshot
        src, dst = _IPV4_ADDRS.unpack(addrs)
        sport, dport = _L4_PORTS.unpack(l4_ports) if l4_ports else (0, 0)
        drop_prob = fault_drop_prob(snap, in_port, src, dst)
        if drop_prob >= 1.0:
            return DROPPED, "fault", 0.0, -1, False
        action: ActionCall | None
        pin = snap.flow_pin.lookup((dst, src, proto, sport, dport)) if snap.flow_pin.entries else None
        entry = pin or snap.ipv4_lpm.lookup((dst,))  # a pinned flow's next hop, or ECMP's (starnet.p4)
        if entry is None:
            action = snap.ipv4_lpm.default_action
        elif entry.action is not None:
            action = entry.action
        else:
            action = self._select(snap.selector, entry.member_id, entry.group_id, (src, dst, proto, sport, dport),
                                  flowlet)
            if action is None:
                return DROPPED, "no_live_member", drop_prob, -1, False
        if action.action_id != snap.set_nhop_id:
            return DROPPED, "no_route", drop_prob, -1, False
        port, smac, dmac = action.args
        sample_log2 = -1
        if proto in (6, 17):
            role = snap.port_role.lookup((in_port,))
            if role is not None and role.action is not None and role.action.args[0] == ROLE_HOST:
                watch = snap.int_source.lookup((src, dst, proto, sport, dport))
                if watch is not None and watch.action is not None and watch.action.action_id == snap.int_watch_id:
                    sample_log2 = min(16, watch.action.args[0])
        sink_entry = snap.int_sink.lookup((port,))
        sink = sink_entry is not None and sink_entry.action is not None
        return port, mac_bytes(dmac) + mac_bytes(smac), drop_prob, sample_log2, sink

    def _select(self, selector: ActionProfileState, member_id: int | None, group_id: int | None,
                five_tuple: tuple[int, int, int, int, int], flowlet: int = 0) -> ActionCall | None:
        members = selector.members
        if member_id is not None:
            found = members.get(member_id)
            return found[0] if found else None
        group = selector.groups.get(group_id)  # type: ignore[arg-type]
        if group is None:
            return None
        live = []
        for m in group[0]:
            if m.watch_port is not None and not self.port_up.get(m.watch_port, True):
                continue
            live.extend([m.member_id] * m.weight)
        if not live:
            return None
        chosen = live[ecmp_hash(five_tuple, flowlet) % len(live)]
        found = members.get(chosen)
        return found[0] if found else None


def ecmp_hash(five_tuple: tuple[int, int, int, int, int], flowlet: int = 0) -> int:
    """Selector hash over (src, dst, proto, sport, dport) and the flowlet number (when not 0),
    CRC-32 of their network-order bytes."""
    packed = _FIVE_TUPLE.pack(*five_tuple)
    return zlib.crc32(packed + flowlet.to_bytes(2, "big") if flowlet else packed)


def mark_ce(frame: bytearray) -> bool:
    """Set ECN to CE on an ECT(0)/ECT(1) IPv4 frame, updating the header checksum (RFC 1624)."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return False
    tos = frame[15]
    if tos & 3 in (0, 3):
        return tos & 3 == 3
    set_ipv4_word(frame, 14, (frame[14] << 8) | tos | 3)
    return True
