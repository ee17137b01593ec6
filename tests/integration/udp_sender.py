"""Send COUNT UDP datagrams from a fixed source port: `udp_sender.py DST SPORT COUNT [DPORT]`."""

import socket
import sys

dst, sport, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dport = int(sys.argv[4]) if len(sys.argv) > 4 else 9
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.bind(("", sport))
    for _ in range(count):
        s.sendto(b"x" * 100, (dst, dport))
