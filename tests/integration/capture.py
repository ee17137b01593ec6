"""Capture frames to or from an L4 port on an interface: `capture.py IFACE L4PORT COUNT SECONDS`.

Prints one JSON list of hex-encoded frames (TCP or UDP over IPv4, either port matching) when COUNT
frames were seen or SECONDS passed. Runs inside a Mininet host."""

import json
import select
import socket
import sys
import time

iface, l4port, count, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
sock.bind((iface, 0))
frames = []
deadline = time.monotonic() + seconds
print("ready", file=sys.stderr, flush=True)
while len(frames) < count and (left := deadline - time.monotonic()) > 0:
    if not select.select([sock], [], [], left)[0]:
        break
    frame, address = sock.recvfrom(65535)
    if address[2] == socket.PACKET_OUTGOING or len(frame) < 38 or frame[23] not in (6, 17):
        continue
    ihl = (frame[14] & 0x0F) * 4
    ports = (int.from_bytes(frame[14 + ihl:16 + ihl], "big"), int.from_bytes(frame[16 + ihl:18 + ihl], "big"))
    if l4port in ports:
        frames.append(frame.hex())
print(json.dumps(frames))
