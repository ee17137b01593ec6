"""The CPU port and what crosses it, as starnet.p4 declares it (p4src/include/headers.p4):
the CPU port number, packet-in reasons, the INT report clone session and its truncation, the
controller's probe EtherType and the port roles the controller writes into port_role.
tests/unit/wire/test_contract.py checks every number here against the P4 source.

packet_in {ingress_port:16, reason:8, pad:8}, packet_out {egress_port:16, pad:16}: on the
P4Runtime stream these travel as PacketMetadata (ids from the P4Info); between BMv2's data plane
and its --cpu-port they are a 4-byte header before Ethernet.
"""

from __future__ import annotations

import struct

CPU_PORT = 255                 # BMv2 --cpu-port; the soft switch uses the same number
ETHERTYPE_PROBE = 0x88B5       # controller link probes, punted with REASON_PROBE
REASON_INT_REPORT = 1          # packet_in.reason
REASON_PROBE = 2
REPORT_SESSION = 500           # I2E clone session of INT reports, to the CPU port
REPORT_TRUNCATE_BYTES = 512    # bytes of the frame a report carries (the program's truncate())
REPORT_INTERVAL_US = 10_000    # at most one routine report per flow slot per 10 ms
REPORT_CONGESTED_INTERVAL_US = 2_500  # a congested one at once, but not within 2.5 ms of the flow's last
REPORT_FLOW_SLOTS = 1024
ROLE_HOST = 1                  # port_role: a host-facing port (INT may start here)
ROLE_FABRIC = 2

PACKET_IN_BYTES = 4
PACKET_OUT_BYTES = 4
_PACKET_IN = struct.Struct("!HBB")
_PACKET_OUT = struct.Struct("!HH")


def pack_packet_in(ingress_port: int, reason: int) -> bytes:
    return _PACKET_IN.pack(ingress_port, reason, 0)


def unpack_packet_in(data: bytes) -> tuple[int, int]:
    ingress_port, reason, _ = _PACKET_IN.unpack_from(data)
    return ingress_port, reason


def pack_packet_out(egress_port: int) -> bytes:
    return _PACKET_OUT.pack(egress_port, 0)


def unpack_packet_out(data: bytes) -> int:
    return int(_PACKET_OUT.unpack_from(data)[0])
