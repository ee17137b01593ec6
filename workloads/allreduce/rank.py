"""One all-reduce rank: `python -m workloads.allreduce.rank`, started by the launcher (in a Mininet
host's namespace, or on loopback).

It talks to the launcher over a Unix socket (JSON lines; Mininet hosts share the filesystem) and to
the other ranks over TCP: a full mesh, so one job can run every algorithm. Protocol, launcher → rank:
  ← {"hello": rank, "port": data port}      → {"peers": [[ip, port], …]}
  ← {"connected": n}                         → {"run": {"count", "algo", "chunk", "iter"}}
  ← {"ready": iter}                          → {"go": iter}
  ← {"done": iter, "start", "end", "wrong", "steps"} or {"error": text}   … → {"exit": true}
"""

from __future__ import annotations

import argparse
import logging
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

from workloads.allreduce.data import count_wrong, expected_sum, rank_data
from workloads.allreduce.executor import Executor, PeerError, cut
from workloads.allreduce.schedule import bytes_sent, schedule
from workloads.hosts import Control

log = logging.getLogger("allreduce.rank")
HELLO = struct.Struct("!I")
MAX_PEERS = 50  # with --port-base: listeners on BASE..BASE+49, connections from BASE+50..BASE+99


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="workloads.allreduce.rank")
    parser.add_argument("--control", type=Path, required=True, help="the launcher's Unix socket")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--ip", required=True, help="address to listen on for the other ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cc", help="TCP congestion control of the data connections (cubic, bbr, reno, …)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="give up on a silent peer after this")
    parser.add_argument("--controller", help="gRPC address of the controller: declare demands before sending")
    parser.add_argument("--port-base", type=int, default=0,
                        help="listen on BASE+rank and connect from BASE+PEERS+peer (0: ephemeral ports). Fixed "
                             "ports give fixed 5-tuples, so ECMP puts the flows on the same paths in every run")
    parser.add_argument("--log-file", type=Path)
    return parser.parse_args(argv)


def _tune(sock: socket.socket, cc: str | None) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if cc:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        except OSError as exc:
            available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().strip()
            raise SystemExit(f"--cc {cc}: the kernel refused it ({exc}); available: {available}") from exc


def connect_mesh(args: argparse.Namespace, listener: socket.socket,
                 peers: list[tuple[str, int]]) -> dict[int, socket.socket]:
    """Rank r connects to every higher rank and accepts every lower one."""
    conns: dict[int, socket.socket] = {}
    for peer in range(args.rank + 1, args.world):
        ip, port = peers[peer]  # JSON gives a list; sockets want a tuple
        address = (str(ip), int(port))
        if args.port_base:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((args.ip, args.port_base + MAX_PEERS + peer))
            sock.settimeout(args.timeout_s)
            sock.connect(address)
        else:
            sock = socket.create_connection(address, timeout=args.timeout_s)
        _tune(sock, args.cc)
        sock.sendall(HELLO.pack(args.rank))
        conns[peer] = sock
    listener.settimeout(args.timeout_s)
    while len(conns) < args.world - 1:
        sock, _ = listener.accept()
        sock.settimeout(args.timeout_s)
        _tune(sock, args.cc)
        data = b""
        while len(data) < HELLO.size:
            chunk = sock.recv(HELLO.size - len(data))
            if not chunk:
                raise ConnectionError("a peer closed the connection before saying who it is")
            data += chunk
        (peer,) = HELLO.unpack(data)
        conns[peer] = sock
    return conns


class Declarer:
    """Declares this rank's upcoming transfers to the controller (the proactive part of the advice loop)."""

    def __init__(self, address: str, my_ip: str, peer_ips: list[str]) -> None:
        import grpc

        from wire import advice_pb2 as pb
        from wire import advice_pb2_grpc as pb_grpc

        self.pb = pb
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.AdviceStub(self.channel)
        self.my_ip = my_ip
        self.peer_ips = peer_ips
        self.active: set[str] = set()

    def declare(self, sent: dict[int, int]) -> None:
        for peer, nbytes in sent.items():
            dst = self.peer_ips[peer]
            self.stub.DeclareDemand(self.pb.DemandRequest(src=self.my_ip, dst=dst, bytes=nbytes), timeout=5)
            self.active.add(dst)
        for dst in self.active - {self.peer_ips[p] for p in sent}:
            self._stop(dst)

    def _stop(self, dst: str) -> None:
        self.stub.DeclareDemand(self.pb.DemandRequest(src=self.my_ip, dst=dst, stop=True), timeout=5)
        self.active.discard(dst)

    def close(self) -> None:
        for dst in list(self.active):
            try:
                self._stop(dst)
            except Exception as exc:  # noqa: BLE001 - the controller may be gone; the demand then ages out there
                log.warning("could not withdraw the demand to %s: %s", dst, exc)
        self.channel.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(filename=args.log_file, level=logging.INFO,
                        format="%(asctime)s rank %(process)d %(levelname)s %(message)s")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _tune(listener, args.cc)
    listener.bind((args.ip, args.port_base + args.rank if args.port_base else 0))
    listener.listen(args.world)
    control = Control(args.control)
    control.send({"hello": args.rank, "port": listener.getsockname()[1]})
    peers = control.recv()["peers"]
    conns = connect_mesh(args, listener, peers)
    listener.close()
    control.send({"connected": len(conns)})
    declarer = Declarer(args.controller, args.ip, [ip for ip, _ in peers]) if args.controller else None
    inputs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    plans: dict[tuple, tuple] = {}
    try:
        while True:
            message = control.recv()
            if "exit" in message:
                break
            run = message["run"]
            count, algo, chunk = run["count"], run["algo"], run["chunk"]
            if count not in inputs:
                inputs.clear()  # one size at a time: a sweep never holds two sizes' buffers
                inputs[count] = (rank_data(count, args.seed, args.rank), expected_sum(count, args.seed, args.world))
            key = (count, algo, chunk)
            if key not in plans:
                ops = schedule(algo, args.world, args.rank, count)
                plans.clear()
                plans[key] = (Executor(cut(ops, chunk), {p: conns[p] for p in {op.peer for op in ops}}, chunk),
                              bytes_sent(ops))
            executor, sent = plans[key]
            buf = inputs[count][0].copy()
            if declarer is not None:
                declarer.declare(sent)
            control.send({"ready": run["iter"]})
            control.recv()  # go
            start = time.monotonic()
            try:
                steps = executor.run(buf)
            except PeerError as exc:
                control.send({"error": f"rank {args.rank}: {exc}"})
                return 1
            end = time.monotonic()
            control.send({"done": run["iter"], "start": start, "end": end,
                          "wrong": count_wrong(buf, inputs[count][1]),
                          "steps": [[s.step, s.send, s.peer, s.bytes, s.start, s.end] for s in steps]})
    finally:
        if declarer is not None:
            declarer.close()
        for sock in conns.values():
            sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
