"""CPU-port headers: packet_in {ingress_port:16, reason:8, pad:8}, packet_out {egress_port:16, pad:16}.

On the P4Runtime stream these travel as PacketMetadata (ids from the P4Info); on the wire
between data plane and CPU port (BMv2's --cpu-port) they are a 4-byte header before Ethernet.
"""

from __future__ import annotations

import enum
import struct

PACKET_IN_LEN = 4
PACKET_OUT_LEN = 4
_PACKET_IN = struct.Struct("!HBB")
_PACKET_OUT = struct.Struct("!HH")


class PacketInReason(enum.IntEnum):
    NONE = 0
    INT_REPORT = 1
    PROBE = 2
    NO_ROUTE = 3
    TTL_EXPIRED = 4


def pack_packet_in(ingress_port: int, reason: int) -> bytes:
    return _PACKET_IN.pack(ingress_port, reason, 0)


def unpack_packet_in(data: bytes) -> tuple[int, int]:
    ingress_port, reason, _ = _PACKET_IN.unpack_from(data)
    return ingress_port, reason


def pack_packet_out(egress_port: int) -> bytes:
    return _PACKET_OUT.pack(egress_port, 0)


def unpack_packet_out(data: bytes) -> int:
    return _PACKET_OUT.unpack_from(data)[0]
