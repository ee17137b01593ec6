"""The soft switch's port sockets on a veth pair of their own: where the kernel takes an 802.1Q tag
off a received frame before any packet socket reads it (here it does: the tag is in the skb's
metadata, not in the data), the port's socket must not read it as an untagged frame — it would be
forwarded without its tag — and the second, tagged-only socket must take it instead."""

from __future__ import annotations

import os
import select
import socket
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from softswitch.portio import open_port_socket
from tests.dataplane.harness import sh

pytestmark = [pytest.mark.root]

FRAME = Ether(src="02:00:00:00:0e:01", dst="02:00:00:00:0e:02")
PLAIN = bytes(FRAME / IP(src="10.77.0.1", dst="10.77.0.2") / UDP(sport=1, dport=2) / (b"\x00" * 20))
TAGGED = bytes(FRAME / Dot1Q(vlan=10) / IP(src="10.77.0.1", dst="10.77.0.2") / UDP(sport=1, dport=2) / (b"\x00" * 20))


@pytest.fixture()
def veth():
    """A veth pair: (the switch's end, a packet socket on the other end)."""
    ours, peer = f"vt{os.getpid() % 100000}a", f"vt{os.getpid() % 100000}b"
    sh("ip", "link", "add", ours, "type", "veth", "peer", "name", peer)
    try:
        for name in (ours, peer):
            sh("sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1")
            sh("ip", "link", "set", name, "up")
        sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        sender.bind((peer, 0))
        with sender:
            yield ours, sender
    finally:
        sh("ip", "link", "del", ours)


def frames(sock: socket.socket, settle_s: float = 0.3) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + settle_s
    while (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            got.append(sock.recv(9018))
    return [f for f in got if f[:12] == PLAIN[:12]]  # ours, not the kernel's own chatter


def test_a_tagged_frame_reaches_only_the_tagged_socket_and_a_plain_one_only_the_port_socket(veth):
    iface, sender = veth
    port, tagged = open_port_socket(iface, timestamps=False), open_port_socket(iface, timestamps=False, tagged=True)
    with port, tagged:
        sender.send(TAGGED)
        sender.send(PLAIN)
        assert frames(port) == [PLAIN]
        # The kernel hands it over without the tag (that is why the data cannot tell)
        assert frames(tagged) == [TAGGED[:12] + TAGGED[16:]]
