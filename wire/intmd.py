"""INT v2.1 (INT-MD over TCP/UDP, DSCP-signalled) as StarNet uses it — the one definition of the layout.

Used by the soft switch (push, strip, validate), the collector (decode reports) and the tests, and
mirrored by p4src/include/headers.p4. Layout, after the L4 header:

    shim (4 B)   type:4=1 | npt:2=0 | r:2 | len:8 (words of MD header + hops) | r:10 | orig DSCP:6
    MD   (12 B)  ver:4=2 | D:1 | E:1 | M:1 | r:12 | hop_ml:5=8 | remaining_hop_cnt:8
                 instruction_bitmap:16 | domain_specific_id:16 | ds_instruction:16 | ds_flags:16
    hop  (32 B)  node_id:32 | ingress_port:16 | egress_port:16 | hop_latency_us:32
     × n, newest | queue_id:8 | queue_occupancy_pkts:24 | egress_ts_us:64 | tx_bytes:32 | capacity_mbps:32
     first

Instruction bits are numbered from the MSB, as in the spec. Fields a target cannot fill are all-ones.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from scapy.fields import BitField, ByteField, IntField, LongField, PacketListField, ShortField, XShortField
from scapy.packet import Packet, bind_layers

DSCP_INT = 0x20
INT_TYPE_MD = 1
INT_VERSION = 2
HOP_WORDS = 8
MAX_HOPS = 6
MD_WORDS = 3
INSTRUCTIONS = 0xF400  # bits 0,1,2,3,5: node id, L1 ports, hop latency, queue id + occupancy, egress ts
DS_ID = 0x5354  # "ST"
DS_INSTRUCTIONS = 0xC000  # DS bit 0: egress tx bytes (mod 2^32), bit 1: egress capacity (Mbit/s)
DS_FLAG_CONGESTED = 0x8000  # DS flags bit 0: some hop saw its queue at or above its ECN threshold
SHIM_BYTES, MD_BYTES, HOP_BYTES = 4, 12, 32
FIXED_BYTES = SHIM_BYTES + MD_BYTES
UNKNOWN32 = 0xFFFFFFFF

_SHIM = struct.Struct("!BBH")
_MD = struct.Struct("!IHHHH")
_HOP = struct.Struct("!IHHIIQII")
HOP_STRUCT = _HOP  # node, in port, out port, latency, queue id << 24 | occupancy, egress ts, tx bytes, capacity


class IntFormatError(ValueError):
    """Bytes that claim to be INT but are not valid StarNet INT; the message says what is wrong."""


@dataclass(frozen=True)
class Hop:
    node_id: int
    ingress_port: int
    egress_port: int
    hop_latency_us: int
    queue_occupancy_pkts: int
    egress_ts_us: int
    tx_bytes: int
    capacity_mbps: int
    queue_id: int = 0

    def pack(self) -> bytes:
        return _HOP.pack(self.node_id, self.ingress_port, self.egress_port, self.hop_latency_us & UNKNOWN32,
                         (self.queue_id << 24) | (self.queue_occupancy_pkts & 0xFFFFFF),
                         self.egress_ts_us & 0xFFFFFFFFFFFFFFFF, self.tx_bytes & UNKNOWN32,
                         self.capacity_mbps & UNKNOWN32)

    @classmethod
    def unpack(cls, data: bytes, offset: int = 0) -> Hop:
        node, in_port, out_port, latency, queue, ts, tx, cap = _HOP.unpack_from(data, offset)
        return cls(node, in_port, out_port, latency, queue & 0xFFFFFF, ts, tx, cap, queue >> 24)


@dataclass
class IntStack:
    """Shim + MD header + hops (newest first), as found after an L4 header."""

    orig_dscp: int = 0
    remaining_hop_cnt: int = MAX_HOPS
    e_flag: bool = False
    ds_flags: int = 0
    hops: list[Hop] = field(default_factory=list)
    instruction_bitmap: int = INSTRUCTIONS
    ds_instruction: int = DS_INSTRUCTIONS
    domain_specific_id: int = DS_ID

    @property
    def congested(self) -> bool:
        return bool(self.ds_flags & DS_FLAG_CONGESTED)

    @property
    def length_bytes(self) -> int:
        return FIXED_BYTES + HOP_BYTES * len(self.hops)

    def pack(self) -> bytes:
        words = MD_WORDS + HOP_WORDS * len(self.hops)
        shim = _SHIM.pack(INT_TYPE_MD << 4, words, self.orig_dscp & 0x3F)
        md = _MD.pack((INT_VERSION << 28) | (int(self.e_flag) << 26) | (HOP_WORDS << 8) | self.remaining_hop_cnt,
                      self.instruction_bitmap, self.domain_specific_id, self.ds_instruction, self.ds_flags)
        return shim + md + b"".join(h.pack() for h in self.hops)


def int_length(data: bytes | bytearray, offset: int) -> int:
    """Bytes of the INT block (shim + MD + hops) starting at `offset`; IntFormatError if not valid.

    Checks what a switch must check before it pushes, strips or reports: type, version, hop
    metadata length, a whole number of hops within the hop budget, and that it fits the frame."""
    if len(data) < offset + FIXED_BYTES:
        raise IntFormatError("INT header runs past the end of the frame")
    type_byte, words, _ = _SHIM.unpack_from(data, offset)
    if type_byte >> 4 != INT_TYPE_MD:
        raise IntFormatError(f"INT shim type {type_byte >> 4}, expected {INT_TYPE_MD} (MD)")
    word0 = _MD.unpack_from(data, offset + SHIM_BYTES)[0]
    if word0 >> 28 != INT_VERSION:
        raise IntFormatError(f"INT version {word0 >> 28}, expected {INT_VERSION}")
    if (word0 >> 8) & 0x1F != HOP_WORDS:
        raise IntFormatError(f"INT hop metadata length {(word0 >> 8) & 0x1F} words, expected {HOP_WORDS}")
    if words < MD_WORDS or (words - MD_WORDS) % HOP_WORDS:
        raise IntFormatError(f"INT length {words} words is not the MD header plus whole hops")
    hops = (words - MD_WORDS) // HOP_WORDS
    if hops + (word0 & 0xFF) > MAX_HOPS:
        raise IntFormatError(f"INT carries {hops} hops with {word0 & 0xFF} remaining: over the {MAX_HOPS}-hop budget")
    length = SHIM_BYTES + 4 * words
    if len(data) < offset + length:
        raise IntFormatError(f"INT length {length} B runs past the end of the frame")
    return length


def parse(data: bytes, offset: int = 0) -> IntStack:
    """Decode the INT block at `offset` (validated as by int_length)."""
    length = int_length(data, offset)
    _, words, dscp_field = _SHIM.unpack_from(data, offset)
    word0, bitmap, ds_id, ds_instruction, ds_flags = _MD.unpack_from(data, offset + SHIM_BYTES)
    hops = [Hop.unpack(data, offset + FIXED_BYTES + HOP_BYTES * i) for i in range((length - FIXED_BYTES) // HOP_BYTES)]
    return IntStack(orig_dscp=dscp_field & 0x3F, remaining_hop_cnt=word0 & 0xFF, e_flag=bool(word0 >> 26 & 1),
                    ds_flags=ds_flags, hops=hops, instruction_bitmap=bitmap, ds_instruction=ds_instruction,
                    domain_specific_id=ds_id)


def l4_header_length(frame: bytes | bytearray, l4: int, proto: int) -> int:
    """Length of the TCP (data offset) or UDP (8) header at frame offset `l4`; IntFormatError when
    the frame ends before that header does, or a TCP data offset is below 5 words (a P4 parser
    would reject both before any INT header could be read behind them)."""
    if proto == 17:
        length = 8
    else:
        if len(frame) < l4 + 20:
            raise IntFormatError(f"TCP header truncated: {len(frame) - l4} of 20 bytes")
        length = (frame[l4 + 12] >> 4) * 4
        if length < 20:
            raise IntFormatError(f"TCP data offset {length // 4} words, below the minimum of 5")
    if len(frame) < l4 + length:
        raise IntFormatError(f"L4 header runs past the end of the frame ({len(frame) - l4} of {length} bytes)")
    return length


def int_offset(frame: bytes | bytearray, proto: int) -> int | None:
    """Where the INT block of a frame marked with an INT DSCP starts (Ethernet + a 20-byte IPv4
    header, TCP or UDP), or None when what follows the L4 header is no valid INT header: foreign
    traffic that happens to carry the INT DSCP, which a switch forwards as plain. starnet.p4's parser
    states check_int_room/_header/_hops decide the same way: room for a shim and an MD header by the
    IPv4 total length, type MD, version 2, 8-word hops, a length of the MD header plus whole hops,
    and hops carried + hops remaining within MAX_HOPS. IntFormatError when the frame ends before its
    headers do (the TCP header or options, or the INT block it claims): the P4 parser's
    PacketTooShort, malformed."""
    l4 = 34
    total = (frame[16] << 8) | frame[17]
    if proto == 17:
        int_off, payload = l4 + 8, total - 28
    else:
        if len(frame) < l4 + 20:
            raise IntFormatError(f"TCP header truncated: {len(frame) - l4} of 20 bytes")
        options = max(0, (frame[l4 + 12] >> 4) - 5) * 4  # below 5 words: no options (as starnet.p4)
        int_off, payload = l4 + 20 + options, total - 40 - options
    if payload & 0xFFF0 == 0:  # mod 2^16, as the P4 parser's bit<16>
        return None
    if len(frame) < int_off + FIXED_BYTES:
        raise IntFormatError("INT header runs past the end of the frame")
    words = frame[int_off + SHIM_LEN]
    if frame[int_off] >> 4 != INT_TYPE_MD or frame[int_off + MD_FLAGS] >> 4 != INT_VERSION \
            or frame[int_off + 6] & 0x1F != HOP_WORDS or words & 0xC7 != MD_WORDS \
            or ((words - MD_WORDS) >> 3) + frame[int_off + MD_REMAINING] > MAX_HOPS:
        return None
    if len(frame) < int_off + SHIM_BYTES + 4 * words:
        raise IntFormatError(f"INT length {SHIM_BYTES + 4 * words} B runs past the end of the frame")
    return int_off


# ---- editing INT in a frame ----------------------------------------------------------------------
# Byte offsets from the start of the shim, and the helpers the soft switch pushes and strips INT
# with (Ethernet + a 20-byte IPv4 header; int_off = where the shim starts).
SHIM_LEN = 1          # shim: length of MD header + hops in 4-byte words
SHIM_ORIG_DSCP = 3    # shim: the original DSCP (low 6 bits)
MD_FLAGS = 4          # MD: version (high nibble), D, E, M
MD_FLAG_E = 0x04      # E: a hop had no budget left to push its metadata
MD_REMAINING = 7      # MD: remaining hop count
MD_DS_FLAGS = 14      # MD: high byte of the domain-specific flags (DS_FLAG_CONGESTED is its MSB)
_WORDS20 = struct.Struct("!10H")


def ipv4_checksum(frame: bytearray) -> None:
    """Recompute the IPv4 header checksum of an Ethernet frame (20-byte header) in place."""
    frame[24] = frame[25] = 0
    total = sum(_WORDS20.unpack_from(frame, 14))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    check = ~total & 0xFFFF
    frame[24], frame[25] = check >> 8, check & 0xFF


def set_ipv4_word(frame: bytearray, offset: int, new: int) -> None:
    """Write the 16-bit word at frame offset `offset` (inside the IPv4 header of an Ethernet frame)
    and update the header checksum incrementally (RFC 1624, eqn. 3): the one such function."""
    old = (frame[offset] << 8) | frame[offset + 1]
    check = (~((frame[24] << 8) | frame[25]) & 0xFFFF) + (~old & 0xFFFF) + new
    check = (check & 0xFFFF) + (check >> 16)
    check = ~((check & 0xFFFF) + (check >> 16)) & 0xFFFF
    frame[offset], frame[offset + 1] = new >> 8, new & 0xFF
    frame[24], frame[25] = check >> 8, check & 0xFF


def grow_lengths(frame: bytearray, delta: int) -> None:
    set_ipv4_word(frame, 16, (((frame[16] << 8) | frame[17]) + delta) & 0xFFFF)
    if frame[23] == 17:
        udp_len = ((frame[38] << 8) | frame[39]) + delta
        frame[38], frame[39] = (udp_len >> 8) & 0xFF, udp_len & 0xFF


def set_tos(frame: bytearray, tos: int) -> None:
    set_ipv4_word(frame, 14, (frame[14] << 8) | tos)


_SOURCE_BLOCK = IntStack(orig_dscp=0).pack()


def insert_source_header(frame: bytearray, int_off: int, int_dscp: int = DSCP_INT) -> bytearray:
    """Shim + MD header (no hops yet) after the L4 header; DSCP := `int_dscp`, the original in the shim."""
    dscp = frame[15] >> 2
    out = frame[:int_off] + _SOURCE_BLOCK + frame[int_off:]
    out[int_off + SHIM_ORIG_DSCP] = dscp
    set_tos(out, (int_dscp << 2) | (frame[15] & 3))
    grow_lengths(out, FIXED_BYTES)
    return out


def push_hop(frame: bytearray, int_off: int, hop: bytes, congested: bool) -> bytearray:
    """Put `hop` in front of the stack, or set E when no hop budget remains; flag congestion."""
    remaining = frame[int_off + MD_REMAINING]
    if remaining == 0:
        out = frame
        out[int_off + MD_FLAGS] |= MD_FLAG_E
    else:
        at = int_off + FIXED_BYTES
        out = frame[:at] + hop + frame[at:]
        out[int_off + SHIM_LEN] += HOP_WORDS
        out[int_off + MD_REMAINING] = remaining - 1
        grow_lengths(out, HOP_BYTES)
    if congested:
        out[int_off + MD_DS_FLAGS] |= DS_FLAG_CONGESTED >> 8
    return out


def strip(frame: bytearray, int_off: int) -> bytearray:
    """Remove the INT block; restore the original DSCP (ECN bits as they are now) and lengths."""
    length = SHIM_BYTES + 4 * frame[int_off + SHIM_LEN]
    dscp = frame[int_off + SHIM_ORIG_DSCP] & 0x3F
    out = frame[:int_off] + frame[int_off + length:]
    set_tos(out, (dscp << 2) | (frame[15] & 3))
    grow_lengths(out, -length)
    return out


# ---- scapy layers: pkt.show() explains INT bytes ------------------------------------------------
class IntHopLayer(Packet):
    name = "INT hop"
    fields_desc = [
        IntField("node_id", 0), ShortField("ingress_port", 0), ShortField("egress_port", 0),
        IntField("hop_latency_us", 0), ByteField("queue_id", 0), BitField("queue_occupancy_pkts", 0, 24),
        LongField("egress_ts_us", 0), IntField("tx_bytes", 0), IntField("capacity_mbps", 0),
    ]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class IntMdLayer(Packet):
    name = "INT-MD header"
    fields_desc = [
        BitField("ver", INT_VERSION, 4), BitField("d", 0, 1), BitField("e", 0, 1), BitField("m", 0, 1),
        BitField("rsvd", 0, 12), BitField("hop_ml", HOP_WORDS, 5), ByteField("remaining_hop_cnt", MAX_HOPS),
        XShortField("instruction_bitmap", INSTRUCTIONS), XShortField("domain_specific_id", DS_ID),
        XShortField("ds_instruction", DS_INSTRUCTIONS), XShortField("ds_flags", 0),
        PacketListField("hops", [], IntHopLayer,
                        count_from=lambda pkt: max(0, ((pkt.underlayer.len if pkt.underlayer else MD_WORDS)
                                                       - MD_WORDS) // HOP_WORDS)),
    ]


class IntShimLayer(Packet):
    name = "INT shim (TCP/UDP)"
    fields_desc = [
        BitField("int_type", INT_TYPE_MD, 4), BitField("npt", 0, 2), BitField("rsvd", 0, 2),
        ByteField("len", MD_WORDS), BitField("rsvd2", 0, 10), BitField("orig_dscp", 0, 6),
    ]


bind_layers(IntShimLayer, IntMdLayer)


def dissect_int(packet: Packet) -> Packet:
    """Re-dissect the L4 payload of a scapy IP packet as INT when its DSCP says INT is present."""
    from scapy.layers.inet import IP, TCP, UDP

    if IP in packet and packet[IP].tos >> 2 == DSCP_INT:
        for l4 in (UDP, TCP):
            if l4 in packet and packet[l4].payload:
                packet[l4].payload = IntShimLayer(bytes(packet[l4].payload))
                break
    return packet
