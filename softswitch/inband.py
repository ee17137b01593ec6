"""INT in the soft switch: source insertion at ingress, hop push / sink strip and reports at egress.

Mirrors p4src/include/int.p4 with the layout of wire/intmd.py. A frame that carries (or starts)
INT leaves ingress as an IntPending: the hop is written when the frame leaves its egress queue,
so hop latency (ingress to departure, µs), queue occupancy at enqueue (packets) and the egress
timestamp are what the switch really saw. At a sink port (int_sink) the switch adds its own hop,
sends the stack to the CPU port as an INT_REPORT packet-in (at once if any hop flagged congestion,
else at most once per REPORT_INTERVAL_S per flow slot), then strips INT and restores the DSCP and
lengths, so the destination receives the bytes that were sent.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable

from wire.cpu import REASON_INT_REPORT, REPORT_FLOW_SLOTS, REPORT_INTERVAL_US
from wire.intmd import DSCP_INT, FIXED_BYTES, HOP_BYTES, HOP_STRUCT, HOP_WORDS, UNKNOWN32, IntStack

_HOP = HOP_STRUCT
_WORDS20 = struct.Struct("!10H")

REPORT_INTERVAL_S = REPORT_INTERVAL_US / 1e6


class IntPending:
    """A frame carrying INT on its way through the egress queue."""

    __slots__ = ("frame", "in_port", "int_off", "sink", "t_in", "qdepth", "flow_slot")

    def __init__(self, frame: bytearray, in_port: int, int_off: int, sink: bool, t_in: float,
                 flow_slot: int) -> None:
        self.frame = frame
        self.in_port = in_port
        self.int_off = int_off
        self.sink = sink
        self.t_in = t_in
        self.qdepth = 0
        self.flow_slot = flow_slot

    def __len__(self) -> int:
        # Bytes on the wire as the token bucket should see them.
        if self.sink:
            return len(self.frame) - 4 - 4 * self.frame[self.int_off + 1]
        return len(self.frame) + HOP_BYTES


def ipv4_checksum(frame: bytearray) -> None:
    """Recompute the IPv4 header checksum of an Ethernet frame (20-byte header) in place."""
    frame[24] = frame[25] = 0
    total = sum(_WORDS20.unpack_from(frame, 14))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    check = ~total & 0xFFFF
    frame[24], frame[25] = check >> 8, check & 0xFF


def _set_word(frame: bytearray, offset: int, new: int) -> None:
    """Write the 16-bit word at `offset` of the IPv4 header, updating its checksum (RFC 1624)."""
    old = (frame[offset] << 8) | frame[offset + 1]
    check = (~((frame[24] << 8) | frame[25]) & 0xFFFF) + (~old & 0xFFFF) + new
    check = (check & 0xFFFF) + (check >> 16)
    check = ~((check & 0xFFFF) + (check >> 16)) & 0xFFFF
    frame[offset], frame[offset + 1] = new >> 8, new & 0xFF
    frame[24], frame[25] = check >> 8, check & 0xFF


def _grow_lengths(frame: bytearray, delta: int) -> None:
    _set_word(frame, 16, (((frame[16] << 8) | frame[17]) + delta) & 0xFFFF)
    if frame[23] == 17:
        udp_len = ((frame[38] << 8) | frame[39]) + delta
        frame[38], frame[39] = (udp_len >> 8) & 0xFF, udp_len & 0xFF


def _set_tos(frame: bytearray, tos: int) -> None:
    _set_word(frame, 14, (frame[14] << 8) | tos)


def flow_slot(addrs_ports: bytes, proto: int) -> int:
    return zlib.crc32(addrs_ports + bytes((proto,))) % REPORT_FLOW_SLOTS


_SOURCE_BLOCK = IntStack(orig_dscp=0).pack()


def insert_source_header(frame: bytearray, int_off: int) -> bytearray:
    """Shim + MD header (no hops yet) after the L4 header; DSCP := INT, original DSCP in the shim."""
    dscp = frame[15] >> 2
    out = frame[:int_off] + _SOURCE_BLOCK + frame[int_off:]
    out[int_off + 3] = dscp
    _set_tos(out, (DSCP_INT << 2) | (frame[15] & 3))
    _grow_lengths(out, FIXED_BYTES)
    return out


def push_hop(frame: bytearray, int_off: int, hop: bytes, congested: bool) -> bytearray:
    """Put `hop` in front of the stack, or set E when no hop budget remains; flag congestion."""
    remaining = frame[int_off + 7]
    if remaining == 0:
        out = frame
        out[int_off + 4] |= 0x04  # E: a hop could not push its metadata
    else:
        at = int_off + FIXED_BYTES
        out = frame[:at] + hop + frame[at:]
        out[int_off + 1] += HOP_WORDS
        out[int_off + 7] = remaining - 1
        _grow_lengths(out, HOP_BYTES)
    if congested:
        out[int_off + 14] |= 0x80  # DS flags bit 0 (MSB)
    return out


def strip(frame: bytearray, int_off: int) -> bytearray:
    """Remove the INT block; restore the original DSCP (ECN bits as they are now) and lengths."""
    length = 4 + 4 * frame[int_off + 1]
    dscp = frame[int_off + 3] & 0x3F
    out = frame[:int_off] + frame[int_off + length:]
    _set_tos(out, (dscp << 2) | (frame[15] & 3))
    _grow_lengths(out, -length)
    return out


class IntEngine:
    """Per-switch INT state: node id, port capacities and thresholds, report rate limit, clock."""

    def __init__(self) -> None:
        self.node_id = 0
        self.capacity_mbps: dict[int, int] = {}
        self.ecn_thresholds: dict[int, int] = {}
        # Bytes of the frame a report carries (starnet.p4's truncate(), or clone session 500's
        # packet_length_bytes if shorter); None = no session, no reports.
        self.report_bytes: int | None = None
        self.last_report = [0.0] * REPORT_FLOW_SLOTS
        self.to_cpu: Callable[[bytes, int, int], None] | None = None
        self.epoch = time.monotonic()
        self.reports = 0
        self.rate_limited = 0

    def clock_us(self, t: float) -> int:
        """The switch-local clock in µs, starting at 0 like BMv2's."""
        return int((t - self.epoch) * 1e6)

    def egress(self, item: IntPending, port: int, tx_bytes: int, now: float | None = None) -> bytearray:
        """The frame as it leaves `port` at monotonic time `now` (default: the clock): with this
        switch's hop (transit), or stripped (sink)."""
        if now is None:
            now = time.monotonic()
        threshold = self.ecn_thresholds.get(port, 0)
        congested = bool(threshold) and item.qdepth >= threshold
        hop = _HOP.pack(self.node_id, item.in_port, port, min(UNKNOWN32, max(0, int((now - item.t_in) * 1e6))),
                        min(item.qdepth, 0xFFFFFF), max(0, int((now - self.epoch) * 1e6)), tx_bytes,
                        self.capacity_mbps.get(port, UNKNOWN32))
        with_hop = push_hop(item.frame, item.int_off, hop, congested)
        if not item.sink:
            return with_hop
        self._report(with_hop, item, now)
        return strip(with_hop, item.int_off)

    def _report(self, frame: bytearray, item: IntPending, now: float) -> None:
        if self.report_bytes is None or self.to_cpu is None:
            return
        congested = bool(frame[item.int_off + 14] & 0x80)
        if not congested and now - self.last_report[item.flow_slot] < REPORT_INTERVAL_S:
            self.rate_limited += 1
            return
        self.last_report[item.flow_slot] = now
        self.reports += 1
        report = bytes(frame[:self.report_bytes])
        self.to_cpu(report, item.in_port, REASON_INT_REPORT)
