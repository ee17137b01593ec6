"""Sample the TCP state of hosts' connections every few milliseconds, from their namespaces.

    python -m lab.tcpstate --out runs/<id>/tcp.csv --host h1=/proc/<pid>/ns/net [--host ...]
        [--interval-ms 10] [--dports 5301-5306]

One process for every host: it opens a sock_diag socket inside each host's network namespace
(setns to it, socket(), setns back: a netlink socket stays in the namespace it was made in) and
asks each, every interval, for its TCP sockets with their tcp_info and congestion control (the
interface `ss -tin` uses). One CSV row per matching connection per sample: cwnd, ssthresh,
smoothed and minimum RTT, retransmissions, lost and unacknowledged segments, delivery rate, the
ECN flags (negotiated, CE seen), segments delivered and delivered with CE, and the CA state (open,
disorder, cwr, recovery, loss). Runs until SIGTERM.

Cost matters on a 2-core machine that also runs the switches: the request is one prebuilt message,
the reply is read with struct at the offsets needed, rows are formatted directly (pyroute2's
DiagSocket decodes every attribute into objects, ~1.2 ms a query here; a process per host with
per-row objects took ~10% of a core each at 10 ms).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import math
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO, INET_DIAG_CONG = 2, 4
TCP_LISTEN, TCP_TIME_WAIT = 10, 6
ALL_STATES_BUT_LISTEN = 0xFFF & ~(1 << TCP_LISTEN)
TCPI_OPT_ECN, TCPI_OPT_ECN_SEEN = 8, 16
CA_STATES = ("open", "disorder", "cwr", "recovery", "loss")

_NLMSGHDR = struct.Struct("=IHHII")
_REQUEST = struct.Struct("=IHHIIBBBxI48s")  # nlmsghdr + inet_diag_req_v2 (family, protocol, ext, states, sockid)
_DIAG_MSG_BYTES = 72  # struct inet_diag_msg
_RTA = struct.Struct("=HH")
# Fields of struct tcp_info (linux/tcp.h) read here, at their byte offsets.
_INFO_HEAD = struct.Struct("=BB3xB")  # state, ca_state, options (offset 0, 1, 5)
_INFO_FIELDS = struct.Struct("=I")
OFFSETS = {"unacked": 24, "lost": 32, "rtt": 68, "snd_ssthresh": 76, "snd_cwnd": 80, "total_retrans": 100,
           "bytes_acked": 120, "min_rtt": 148, "delivered": 192, "delivered_ce": 196}
_DELIVERY_RATE = struct.Struct("=Q")  # offset 160
INFO_MIN_BYTES = 200
CLONE_NEWNET = 0x40000000

FIELDS = ("host", "src", "sport", "dst", "dport", "cc", "ca_state", "cwnd", "ssthresh", "rtt_ms", "min_rtt_ms",
          "total_retrans", "lost", "unacked", "delivery_rate_mbps", "ecn", "ecn_seen", "delivered", "delivered_ce",
          "bytes_acked")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def diag_socket(netns: str | None = None) -> socket.socket:
    """A sock_diag socket in the network namespace at path `netns` (default: this thread's own)."""
    if netns is None:
        return _open()
    own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return _open()
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


def _open() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    sock.bind((0, 0))
    return sock


class TcpStateReader:
    """One host's sock_diag socket; query() yields a CSV row (list of fields) per TCP connection.

    A dump walks the kernel's whole TCP hash table (every namespace's), ~0.9 ms here: so the
    connections are found by a dump once per DISCOVER_S, and between dumps each known connection is
    asked for by its exact socket id, a hash lookup."""

    DISCOVER_S = 0.5

    def __init__(self, host: str, netns: str | None = None, timeout_s: float = 0.5) -> None:
        self.host, self.netns, self.timeout_s = host, netns, timeout_s
        self.sock = self._open()
        self.seq = 0
        self.timeouts = 0
        self.known: dict[bytes, None] = {}  # socket ids (inet_diag_sockid) of matching connections
        self.discovered_at = -math.inf

    def _open(self) -> socket.socket:
        sock = diag_socket(self.netns)
        sock.settimeout(self.timeout_s)  # a dump whose end never comes must not hold the sampler
        return sock

    def close(self) -> None:
        self.sock.close()

    def query(self, dports: set[int] | None = None) -> Iterator[list]:
        """Every IPv4 TCP connection of the namespace but listeners and TIME_WAIT (to `dports` if given)."""
        now = time.monotonic()
        if not self.known or now - self.discovered_at >= self.DISCOVER_S:
            self.discovered_at = now
            self.known = {}
            yield from self._ask(NLM_F_DUMP, bytes(48), dports)
            return
        for sockid in list(self.known):
            yield from self._ask(0, sockid, dports)

    def _ask(self, flags: int, sockid: bytes, dports: set[int] | None) -> Iterator[list]:
        self.seq += 1
        ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1))
        self.sock.send(_REQUEST.pack(_REQUEST.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | flags, self.seq, 0,
                                     socket.AF_INET, socket.IPPROTO_TCP, ext, ALL_STATES_BUT_LISTEN, sockid))
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:  # this sample is lost; a fresh socket leaves any late reply behind
                self.timeouts += 1
                self.sock.close()
                self.sock = self._open()
                return
            offset = 0
            while offset + _NLMSGHDR.size <= len(data):
                length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, offset)
                if length < _NLMSGHDR.size:
                    return
                if kind == NLMSG_DONE and seq == self.seq:
                    return
                if kind == NLMSG_ERROR and seq == self.seq:
                    code = -struct.unpack_from("=i", data, offset + _NLMSGHDR.size)[0]
                    if code == errno.ENOENT and not flags:  # the connection is gone
                        self.known.pop(sockid, None)
                        return
                    raise OSError(code, f"sock_diag: {os.strerror(code)}")
                if kind == SOCK_DIAG_BY_FAMILY and seq == self.seq:
                    start = offset + _NLMSGHDR.size
                    row = self._row(data, start, offset + length, dports)
                    if row is not None:
                        self.known[data[start + 4:start + 52]] = None
                        yield row
                    elif not flags:
                        self.known.pop(sockid, None)  # closed meanwhile (TIME_WAIT)
                if not flags and kind == SOCK_DIAG_BY_FAMILY:
                    return  # an exact request has one answer
                offset += (length + 3) & ~3

    def _row(self, data: bytes, start: int, end: int, dports: set[int] | None) -> list | None:
        state = data[start + 1]
        sport, dport = struct.unpack_from(">HH", data, start + 4)
        if state == TCP_TIME_WAIT or (dports is not None and dport not in dports):
            return None
        info_at, cc = -1, ""
        offset = start + _DIAG_MSG_BYTES
        while offset + _RTA.size <= end:
            length, kind = _RTA.unpack_from(data, offset)
            if length < _RTA.size:
                break
            if kind == INET_DIAG_INFO and length - _RTA.size >= INFO_MIN_BYTES:
                info_at = offset + _RTA.size
            elif kind == INET_DIAG_CONG:
                cc = data[offset + _RTA.size:offset + length].split(b"\0", 1)[0].decode(errors="replace")
            offset += (length + 3) & ~3
        if info_at < 0:
            return None
        _state, ca_state, options = _INFO_HEAD.unpack_from(data, info_at)
        f = {name: _INFO_FIELDS.unpack_from(data, info_at + at)[0] for name, at in OFFSETS.items()}
        f["bytes_acked"] = _DELIVERY_RATE.unpack_from(data, info_at + OFFSETS["bytes_acked"])[0]
        rate = _DELIVERY_RATE.unpack_from(data, info_at + 160)[0]
        return [self.host, socket.inet_ntoa(data[start + 8:start + 12]), sport,
                socket.inet_ntoa(data[start + 24:start + 28]), dport, cc,
                CA_STATES[ca_state] if ca_state < len(CA_STATES) else ca_state, f["snd_cwnd"], f["snd_ssthresh"],
                f["rtt"] / 1e3, f["min_rtt"] / 1e3, f["total_retrans"], f["lost"], f["unacked"],
                round(rate * 8 / 1e6, 3), int(bool(options & TCPI_OPT_ECN)), int(bool(options & TCPI_OPT_ECN_SEEN)),
                f["delivered"], f["delivered_ce"], f["bytes_acked"]]


def parse_ports(text: str) -> set[int]:
    """'5301-5306,5401' → the set of ports; ValueError naming the bad part."""
    ports: set[int] = set()
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"--dports: {part!r} is not a port or a range of ports") from None
        if not 0 < first <= last < 65536:
            raise ValueError(f"--dports: {part!r} is outside 1-65535")
        ports.update(range(first, last + 1))
    return ports


def sample(out: Path, readers: list[TcpStateReader], interval_s: float, dports: set[int] | None,
           stopping: threading.Event) -> int:
    """Write every reader's rows to `out` every interval until `stopping`; returns the number of rows."""
    rows = 0
    with out.open("w") as f:
        f.write("time," + ",".join(FIELDS) + "\n")
        next_at = time.monotonic()
        last_flush = next_at
        while not stopping.is_set():
            stamp = f"{time.time():.6f}"
            for reader in readers:
                for row in reader.query(dports):
                    f.write(stamp + "," + ",".join(map(str, row)) + "\n")
                    rows += 1
            next_at += interval_s
            now = time.monotonic()
            if now - last_flush > 1.0:
                f.flush()
                last_flush = now
            if next_at < now:  # late (a stall): skip the samples missed, keep the phase
                next_at = now
            stopping.wait(next_at - now)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.tcpstate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV file to write")
    parser.add_argument("--host", action="append", default=[], metavar="NAME=NETNS",
                        help="a host and its network namespace (/proc/PID/ns/net); without any: this namespace")
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--dports", default="", help="only connections to these remote ports (e.g. 5301-5306)")
    args = parser.parse_args(argv)
    try:
        dports = parse_ports(args.dports) or None
    except ValueError as exc:
        parser.error(str(exc))
    if args.interval_ms <= 0:
        parser.error("--interval-ms: must be > 0")
    hosts = []
    for item in args.host:
        name, sep, netns = item.partition("=")
        if not sep or not name or not netns:
            parser.error(f"--host: {item!r} is not NAME=NETNS")
        hosts.append((name, netns))
    try:
        readers = [TcpStateReader(name, netns) for name, netns in hosts] or [TcpStateReader("-")]
    except OSError as exc:
        print(f"tcpstate: cannot open a sock_diag socket: {exc}", file=sys.stderr)
        return 1
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    try:
        rows = sample(args.out, readers, args.interval_ms / 1e3, dports, stopping)
    except OSError as exc:
        print(f"tcpstate: {exc}", file=sys.stderr)
        return 1
    lost = sum(r.timeouts for r in readers)
    for reader in readers:
        reader.close()
    print(f"tcpstate: {rows} rows in {args.out}" + (f"; {lost} queries unanswered within 0.5 s" if lost else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
