"""A TCP byte stream whose content is checked: `tcp_stream.py sink PORT` or `tcp_stream.py source DST PORT BYTES`.

The sink accepts one connection, reads to EOF and prints {"bytes": n, "sha256": ...}; the source
sends BYTES bytes of a fixed pattern and prints the same for what it sent. Runs inside Mininet hosts."""

import hashlib
import json
import socket
import sys

CHUNK = 65536


def pattern(n: int) -> bytes:
    block = bytes(range(256)) * (CHUNK // 256)
    return (block * (n // len(block) + 1))[:n]


if sys.argv[1] == "sink":
    server = socket.create_server(("", int(sys.argv[2])))
    conn, _ = server.accept()
    digest, total = hashlib.sha256(), 0
    while data := conn.recv(CHUNK):
        digest.update(data)
        total += len(data)
    print(json.dumps({"bytes": total, "sha256": digest.hexdigest()}))
else:
    data = pattern(int(sys.argv[4]))
    with socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=30) as conn:
        conn.sendall(data)
    print(json.dumps({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}))
