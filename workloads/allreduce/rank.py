"""One collective rank (all-reduce unless the run says otherwise): `python -m workloads.allreduce.rank`,
started by the launcher (in a Mininet host's namespace, or on loopback).

It talks to the launcher over a Unix socket (JSON lines; Mininet hosts share the filesystem) and to
the other ranks over TCP: a full mesh, so one job can run every algorithm. Protocol, launcher → rank:
  ← {"hello": rank, "port": data port[, "nvport": NVLink port]}
                                             → {"peers": [[ip, port, server, nvlink ip, nvlink port], …]}
  ← {"connected": n}                         → {"run": {"count", "algo", "chunk", "iter"
                                                        [, "collective", "split", "rails"]}}
  ← {"ready": iter}                          → {"go": iter}
  ← {"done": iter, "start", "end", "wrong", "steps"} or {"error": text}   … → {"exit": true}
With --controller it reports its pieces' timings there as they complete (ReportSteps: evidence for
fault localisation) and, with --declare, declares its transfers before sending (DeclareDemand). With
--faults-file it follows the compute delay injected on its host (a slow host). A GPU of a multi-GPU
server (--nvlink-ip) also listens on its NVLink address and reaches the ranks of its own server there:
those transfers never cross the fabric, so they are neither declared nor reported to the controller.
It also keeps one connection to each of them through the NICs (NET_CHANNEL), for the share of their
transfers a run's `split` sends that way (TCCL's NVLink+NET parallel path); that share is declared
and reported like any transfer through the fabric.
"""

from __future__ import annotations

import argparse
import logging
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from wire.faultsfile import Followed
from workloads.allreduce.data import Workload, workload
from workloads.allreduce.executor import ComputeDelay, Executor, PeerError, Piece, cut
from workloads.allreduce.schedule import NET_CHANNEL, Op, bytes_sent, channels_for, schedule
from workloads.hosts import Control

log = logging.getLogger("allreduce.rank")
HELLO = struct.Struct("!II")  # rank, channel
MAX_PEERS = 50  # with --port-base: listeners on BASE..BASE+49, connections from BASE+50..BASE+99 (channel 0;
#                a second channel, between ranks of servers, from ephemeral ports)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="workloads.allreduce.rank")
    parser.add_argument("--control", type=Path, required=True, help="the launcher's Unix socket")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--ip", required=True, help="address to listen on for the other ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cc", help="TCP congestion control of the data connections (cubic, bbr, reno, …)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="give up on a silent peer after this")
    parser.add_argument("--controller", help="gRPC address of the controller: report step timings there")
    parser.add_argument("--declare", action="store_true", help="declare demands to the controller before sending")
    parser.add_argument("--job", default="allreduce", help="the job's name, in step reports")
    parser.add_argument("--faults-file", type=Path, help="follow this host's injected faults (compute_delay_ms)")
    parser.add_argument("--port-base", type=int, default=0,
                        help="listen on BASE+rank and connect from BASE+PEERS+peer (0: ephemeral ports). Fixed "
                             "ports give fixed 5-tuples, so ECMP puts the flows on the same paths in every run")
    parser.add_argument("--nvlink-ip", help="this GPU's NVLink address: ranks of its server connect there")
    parser.add_argument("--local", type=int, default=1, help="GPUs per server, ranks server-major (rings, hier)")
    parser.add_argument("--log-file", type=Path)
    return parser.parse_args(argv)


def same_server(peers: list[list], rank: int, peer: int) -> bool:
    """Whether `peer` is a GPU of this rank's server with an NVLink address to reach it at."""
    return peers[rank][2] is not None and peers[peer][2] == peers[rank][2] and peers[peer][3] is not None


def _tune(sock: socket.socket, cc: str | None) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if cc:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        except OSError as exc:
            available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().strip()
            raise SystemExit(f"--cc {cc}: the kernel refused it ({exc}); available: {available}") from exc


def links_to(args: argparse.Namespace, peers: list[list], peer: int) -> list[tuple[int, bool]]:
    """The connections to `peer` as (channel, over NVLink): channels_for(--local) of them, over NVLink
    to a GPU of this server and then one more through the NICs (NET_CHANNEL, the NVLink+NET split);
    over the fabric to the others."""
    channels = channels_for(args.local)
    if same_server(peers, args.rank, peer):
        return [(c, True) for c in range(channels)] + [(NET_CHANNEL, False)]
    return [(c, False) for c in range(channels)]


def connect_mesh(args: argparse.Namespace, listeners: dict[bool, socket.socket],
                 peers: list[list]) -> dict[tuple[int, int], socket.socket]:
    """Rank r connects to every higher rank and accepts every lower one (links_to: over NVLink at
    listeners[True], over the fabric at listeners[False]). Keyed (peer, channel)."""
    conns: dict[tuple[int, int], socket.socket] = {}
    for peer in range(args.rank + 1, args.world):
        for channel, nvlink in links_to(args, peers, peer):
            ip, port = (peers[peer][3], peers[peer][4]) if nvlink else (peers[peer][0], peers[peer][1])
            address = (str(ip), int(port))  # JSON gives a list; sockets want a tuple
            if args.port_base and channel == 0:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((args.nvlink_ip if nvlink else args.ip, args.port_base + MAX_PEERS + peer))
                sock.settimeout(args.timeout_s)
                sock.connect(address)
            else:
                sock = socket.create_connection(address, timeout=args.timeout_s)
            _tune(sock, args.cc)
            sock.sendall(HELLO.pack(args.rank, channel))
            conns[(peer, channel)] = sock
    for nvlink, listener in listeners.items():
        expected = sum(1 for peer in range(args.rank) for _, over in links_to(args, peers, peer) if over == nvlink)
        listener.settimeout(args.timeout_s)
        for _ in range(expected):
            sock, _ = listener.accept()
            sock.settimeout(args.timeout_s)
            _tune(sock, args.cc)
            data = b""
            while len(data) < HELLO.size:
                chunk = sock.recv(HELLO.size - len(data))
                if not chunk:
                    raise ConnectionError("a peer closed the connection before saying who it is")
                data += chunk
            peer, channel = HELLO.unpack(data)
            conns[(peer, channel)] = sock
    return conns


class ControllerLink:
    """The rank's calls to the controller: its upcoming transfers (DeclareDemand, the proactive part
    of the advice loop; only when `declare`) and its pieces' timings as they complete, sent every
    `report_s` (ReportSteps: a slow host shows within a second, not at the end of a long iteration)."""

    def __init__(self, address: str, my_ip: str, peer_ips: list[str], declare: bool, job: str, rank: int,
                 report_s: float = 0.5, nvlink_peers: frozenset[int] = frozenset()) -> None:
        """nvlink_peers: ranks reached over NVLink, whose transfers the fabric never sees (but for
        those through the NICs, NET_CHANNEL: over_fabric)."""
        import grpc

        from wire import advice_pb2 as pb
        from wire import advice_pb2_grpc as pb_grpc

        self.pb = pb
        self.rpc_error = grpc.RpcError
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.AdviceStub(self.channel)
        self.my_ip = my_ip
        self.peer_ips = peer_ips
        self.nvlink_peers = nvlink_peers
        self.declaring = declare
        self.active: set[str] = set()
        self.report = pb.StepReport(host=my_ip, job=job, rank=rank, world=len(peer_ips))
        self.iteration_start = 0.0
        self.pending: list = []
        self.lock = threading.Lock()
        self.report_failures = 0
        self.stopping = threading.Event()
        self.reporter = threading.Thread(target=self._report_every, args=(report_s,), daemon=True)
        self.reporter.start()

    def over_fabric(self, op: Op) -> bool:
        return op.peer not in self.nvlink_peers or op.channel == NET_CHANNEL

    def declare(self, ops: list[Op]) -> None:
        """Declare what `ops` send through the fabric, and withdraw what they no longer send."""
        if not self.declaring:
            return
        sent = bytes_sent([op for op in ops if self.over_fabric(op)])
        for peer, nbytes in sent.items():
            dst = self.peer_ips[peer]
            self.stub.DeclareDemand(self.pb.DemandRequest(src=self.my_ip, dst=dst, bytes=nbytes), timeout=5)
            self.active.add(dst)
        for dst in self.active - {self.peer_ips[p] for p in sent}:
            self._stop(dst)

    def begin(self, iteration: int, start: float) -> None:
        """An iteration starts (time.monotonic()); pieces from now on are reported as part of it."""
        with self.lock:
            self._send()
            self.report.iteration = iteration
            self.iteration_start = start

    def piece_done(self, piece: Piece, nbytes: int, start: float, end: float, work: float) -> None:
        """The executor's on_piece."""
        if not self.over_fabric(piece.op):
            return
        step = self.pb.StepTime(step=piece.op.step, send=piece.op.send, peer=self.peer_ips[piece.op.peer],
                                bytes=nbytes, start_s=max(0.0, start - self.iteration_start),
                                duration_s=end - start, compute_s=work)
        with self.lock:
            self.pending.append(step)

    def _report_every(self, period_s: float) -> None:
        while not self.stopping.wait(period_s):
            with self.lock:
                self._send()

    def _send(self) -> None:
        """Step timings as evidence; a controller that cannot take them costs the job nothing."""
        if not self.pending:
            return
        del self.report.steps[:]
        self.report.steps.extend(self.pending)
        self.pending = []
        try:
            self.stub.ReportSteps(self.report, timeout=2)
        except self.rpc_error as exc:
            self.report_failures += 1
            if self.report_failures == 1:
                log.warning("step timings not reported (the controller said %s); going on without", exc.code())

    def _stop(self, dst: str) -> None:
        self.stub.DeclareDemand(self.pb.DemandRequest(src=self.my_ip, dst=dst, stop=True), timeout=5)
        self.active.discard(dst)

    def close(self) -> None:
        self.stopping.set()
        self.reporter.join()
        with self.lock:
            self._send()
        for dst in list(self.active):
            try:
                self._stop(dst)
            except Exception as exc:  # noqa: BLE001 - the controller may be gone; the demand then ages out there
                log.warning("could not withdraw the demand to %s: %s", dst, exc)
        self.channel.close()


def follow_faults(path: Path, delay: ComputeDelay, stop: threading.Event, period_s: float = 0.1) -> None:
    """Keep `delay` as the host's faults file says: {"compute_delay_ms": D} (absent or 0: none)."""
    followed = Followed(path)
    while True:
        try:
            faults = followed.changed()
            if faults is not None:
                ms = float(faults.get("compute_delay_ms", 0.0))
                if not 0 <= ms <= 60_000:
                    raise ValueError(f"compute_delay_ms must be within 0..60000, got {ms:g}")
                delay.seconds = ms / 1000
                log.warning("injected fault: every received piece's reduce or copy takes %g ms longer", ms)
        except (OSError, ValueError, TypeError) as exc:
            log.error("faults file %s: %s (faults unchanged)", path, exc)
        if stop.wait(period_s):
            return


def _plan(plans: dict[tuple, tuple], key: tuple[int, str, int, str, float, tuple | None], args: argparse.Namespace,
          conns: dict[tuple[int, int], socket.socket], delay: ComputeDelay,
          link: ControllerLink | None) -> tuple[Executor, list[Op]]:
    """The executor of (count, algo, chunk, collective, split, rails) and its ops, made once (one plan kept)."""
    if key not in plans:
        count, algo, chunk, collective, split, rails = key
        ops = schedule(algo, args.world, args.rank, count, args.local, collective, split, rails)
        plans.clear()
        plans[key] = (Executor(cut(ops, chunk), {c: conns[c] for c in {(op.peer, op.channel) for op in ops}}, chunk,
                               delay, link.piece_done if link else None), ops)
    return plans[key]


def _listen(args: argparse.Namespace, ip: str) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _tune(listener, args.cc)
    listener.bind((ip, args.port_base + args.rank if args.port_base else 0))
    listener.listen(args.world)
    return listener


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(filename=args.log_file, level=logging.INFO,
                        format="%(asctime)s rank %(process)d %(levelname)s %(message)s")
    listeners = {False: _listen(args, args.ip)}
    if args.nvlink_ip:
        listeners[True] = _listen(args, args.nvlink_ip)
    control = Control(args.control)
    control.send({"hello": args.rank, "port": listeners[False].getsockname()[1],
                  **({"nvport": listeners[True].getsockname()[1]} if args.nvlink_ip else {})})
    peers = control.recv()["peers"]
    conns = connect_mesh(args, listeners, peers)
    for listener in listeners.values():
        listener.close()
    control.send({"connected": len(conns)})
    nvlink_peers = frozenset(p for p in range(args.world) if p != args.rank and same_server(peers, args.rank, p))
    link = (ControllerLink(args.controller, args.ip, [peer[0] for peer in peers], args.declare, args.job, args.rank,
                           nvlink_peers=nvlink_peers) if args.controller else None)
    delay, stop = ComputeDelay(), threading.Event()
    if args.faults_file:
        threading.Thread(target=follow_faults, args=(args.faults_file, delay, stop), daemon=True).start()
    inputs: dict[tuple[int, str], Workload] = {}
    plans: dict[tuple, tuple] = {}
    try:
        while True:
            message = control.recv()
            if "exit" in message:
                break
            run = message["run"]
            count, collective = run["count"], run.get("collective", "allreduce")
            if (count, collective) not in inputs:
                inputs.clear()  # one size at a time: a sweep never holds two sizes' buffers
                inputs[(count, collective)] = workload(collective, count, args.seed, args.world, args.rank)
            data = inputs[(count, collective)]
            rails = tuple(run["rails"]) if run.get("rails") else None
            executor, ops = _plan(plans, (count, run["algo"], run["chunk"], collective, run.get("split", 0.0), rails),
                                  args, conns, delay, link)
            buf = data.initial.copy()
            if link is not None:
                link.declare(ops)
            control.send({"ready": run["iter"]})
            control.recv()  # go
            start = time.monotonic()
            if link is not None:
                link.begin(run["iter"], start)
            try:
                steps = executor.run(buf)
            except PeerError as exc:
                control.send({"error": f"rank {args.rank}: {exc}"})
                return 1
            end = time.monotonic()
            control.send({"done": run["iter"], "start": start, "end": end,
                          "wrong": data.wrong(buf),
                          "steps": [[s.step, s.send, s.peer, s.bytes, s.start, s.end, s.compute] for s in steps]})
    finally:
        stop.set()
        if link is not None:
            link.close()
        for sock in conns.values():
            sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
