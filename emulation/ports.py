"""Per-run TCP port allocation on 127.0.0.1 (no fixed 50051/9090, no class-global counters), and whether a
server answers at an address."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel reports free on 127.0.0.1 right now."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def port_answers(port: int, host: str = "127.0.0.1", timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def address_answers(address: str, timeout_s: float = 0.2) -> bool:
    """A server accepts connections at a gRPC target: 'HOST:PORT' or 'unix:PATH'."""
    if address.startswith("unix:"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            try:
                s.connect(address.removeprefix("unix:"))
                return True
            except OSError:
                return False
    host, _, port = address.rpartition(":")
    return port_answers(int(port), host.strip("[]"), timeout_s)
