"""The soft switch's port sockets: one AF_PACKET socket per port (our own transmissions not read
back, the qdisc bypassed: the egress queue is the switch's), arrival times from the kernel, and a
classic BPF filter that keeps 802.1Q-tagged frames apart (open_port_socket says why)."""

from __future__ import annotations

import ctypes
import socket
import struct

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h: do not read back our own transmissions
PACKET_QDISC_BYPASS = 20  # linux/if_packet.h: hand frames straight to the driver (the queue is ours)
SO_TIMESTAMPNS = 35  # asm-generic/socket.h: received frames carry the kernel's arrival time (CLOCK_REALTIME)
TIMESPEC = struct.Struct("@qq")
ANCILLARY_BYTES = 64
SO_ATTACH_FILTER = 26  # asm-generic/socket.h
# Classic BPF (linux/filter.h): load the ancillary "VLAN tag present", return keep-all or nothing
_BPF_LD_ANCILLARY, _BPF_JEQ, _BPF_RET = 0x20, 0x15, 0x06
SKF_AD_VLAN_TAG_PRESENT = (-0x1000 + 48) & 0xFFFFFFFF  # SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT
_BPF_INSN = struct.Struct("HBBI")


def vlan_filter(tagged: bool) -> bytes:
    """A classic BPF program (sock_fprog's array) that keeps only frames that did (tagged) or did
    not arrive with an 802.1Q tag."""
    keep_tagged, keep_untagged = (0x40000, 0) if tagged else (0, 0x40000)
    return b"".join(_BPF_INSN.pack(*insn) for insn in (
        (_BPF_LD_ANCILLARY, 0, 0, SKF_AD_VLAN_TAG_PRESENT),
        (_BPF_JEQ, 0, 1, 1),
        (_BPF_RET, 0, 0, keep_tagged),
        (_BPF_RET, 0, 0, keep_untagged),
    ))


def attach_filter(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER with a classic BPF program (the kernel copies it)."""
    code = ctypes.create_string_buffer(program)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER,
                    struct.pack("HL", len(program) // _BPF_INSN.size, ctypes.addressof(code)))


def open_port_socket(iface: str, timestamps: bool = True, tagged: bool = False) -> socket.socket:
    """The port's packet socket. The kernel takes an 802.1Q tag off a received frame before any
    packet socket sees it (the veth's receive VLAN offload, or the stack's own untagging), so a
    socket reading the data would forward the frame untagged; BMv2, through libpcap, sees the tag
    and starnet.p4, which parses no VLAN, drops the frame as non_ipv4. So a BPF filter on the port's
    socket keeps tagged frames out, and a second socket (tagged=True) takes only them, to be
    counted and dropped as BMv2 does."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # no frames until bound, filter first
    attach_filter(sock, vlan_filter(tagged))
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    if timestamps:  # the fidelity monitor's ingress lateness
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((iface, ETH_P_ALL))  # CPython puts the protocol in network order itself
    sock.setblocking(False)
    return sock


def kernel_stamp(ancdata: list) -> float | None:
    """The SO_TIMESTAMPNS arrival time (wall-clock seconds) in a recvmsg's ancillary data."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9
    return None
