"""Send UDP at a fixed rate for a while and print the wall-clock time of the first datagram.

    flow_start.py DST DPORT SPORT RATE_MBPS SECONDS    (runs inside a Mininet host)"""

import socket
import sys
import time

dst, dport, sport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate_bps, seconds = float(sys.argv[4]) * 1e6, float(sys.argv[5])
payload = b"\x00" * 1400
gap = len(payload) * 8 / rate_bps
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("", sport))
first = time.time()
deadline = time.monotonic() + seconds
next_send = time.monotonic()
while time.monotonic() < deadline:
    sock.sendto(payload, (dst, dport))
    next_send += gap
    pause = next_send - time.monotonic()
    if pause > 0:
        time.sleep(pause)
print(f"{first:.6f}")
