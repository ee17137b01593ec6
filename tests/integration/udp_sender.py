"""Send COUNT UDP datagrams from a fixed source port: `udp_sender.py DST SPORT COUNT [DPORT [GAP_MS]]`.

GAP_MS spaces the datagrams (default 0: back to back). A back-to-back burst of small frames can
overflow a BMv2 queue, which drains packets (not bytes) at the link rate ÷ 1500 B."""

import socket
import sys
import time

dst, sport, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dport = int(sys.argv[4]) if len(sys.argv) > 4 else 9
gap_s = float(sys.argv[5]) / 1000 if len(sys.argv) > 5 else 0.0
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.bind(("", sport))
    for i in range(count):
        if gap_s and i:
            time.sleep(gap_s)
        s.sendto(b"x" * 100, (dst, dport))
