"""One host's flow agent: `python -m workloads.flows.agent`, started by the flow launcher in a Mininet
host's namespace (or on loopback).

It sinks every flow sent to it (a TCP listener; each flow is one connection: a header {flow id,
size}, size bytes, then an 8-byte acknowledgement of what arrived) and sends its own flows at their
scheduled times, each on a thread of its own. Protocol with the launcher (JSON lines, Unix socket):
  ← {"hello": index, "port": sink port}     → {"plan": {"t0": CLOCK_MONOTONIC, "peers": {host: [ip, port]},
                                                          "flows": [its flows]}}
  ← {"sent": [one row per own flow]}          → {"report": 1}
  ← {"received": [one row per flow it sank]}  … → {"exit": true}
CLOCK_MONOTONIC is one clock for every namespace of the machine, so t0 and the rows' times compare.
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

from workloads.hosts import Control

log = logging.getLogger("flows.agent")
HEADER = struct.Struct("!QQ")  # flow id, payload bytes
ACK = struct.Struct("!Q")  # payload bytes received
BLOCK = 64 << 10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="workloads.flows.agent")
    parser.add_argument("--control", type=Path, required=True, help="the launcher's Unix socket")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--ip", required=True, help="address the sink listens on")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="give up on a silent flow after this")
    parser.add_argument("--cc", help="TCP congestion control of the flows (cubic, bbr, reno, …)")
    parser.add_argument("--log-file", type=Path)
    return parser.parse_args(argv)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


class Sink:
    """Accepts flows until closed; one row per flow: id, bytes received, first and last byte times."""

    def __init__(self, ip: str, timeout_s: float) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((ip, 0))
        self.listener.listen(128)
        self.port: int = self.listener.getsockname()[1]
        self.timeout_s = timeout_s
        self.rows: list[dict] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, name="sink", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        row: dict = {"peer": peer[0], "bytes": 0}
        buf = bytearray(BLOCK)
        try:
            conn.settimeout(self.timeout_s)
            flow_id, size = HEADER.unpack(recv_exact(conn, HEADER.size))
            row.update(id=flow_id, size_bytes=size, first=time.monotonic())
            while row["bytes"] < size:
                n = conn.recv_into(buf, min(BLOCK, size - row["bytes"]))
                if not n:
                    raise ConnectionError(f"closed after {row['bytes']} of {size} bytes")
                row["bytes"] += n
            row["last"] = time.monotonic()
            self._record(row)  # before the acknowledgement: a sender that has it finds the row here
            conn.sendall(ACK.pack(row["bytes"]))
        except (OSError, struct.error) as exc:
            row["error"] = str(exc)
            log.warning("flow from %s: %s", peer[0], exc)
            if "last" not in row:
                self._record(row)
        finally:
            conn.close()

    def _record(self, row: dict) -> None:
        with self.lock:
            self.rows.append(row)

    def close(self) -> None:
        self.listener.close()


def send_flow(flow: dict, address: tuple[str, int], cc: str | None, timeout_s: float, payload: memoryview) -> dict:
    """One flow: connect, send the header and size bytes, wait for the receiver's acknowledgement."""
    row = {"id": flow["id"], "started": time.monotonic()}
    try:
        with socket.create_connection(address, timeout=timeout_s) as sock:
            if cc:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            sock.sendall(HEADER.pack(flow["id"], flow["size_bytes"]))
            left = flow["size_bytes"]
            while left:
                n = min(left, len(payload))
                sock.sendall(payload[:n])
                left -= n
            (acked,) = ACK.unpack(recv_exact(sock, ACK.size))
        row.update(ended=time.monotonic(), acked_bytes=acked)
        if acked != flow["size_bytes"]:
            row["error"] = f"receiver acknowledged {acked} of {flow['size_bytes']} bytes"
    except (OSError, struct.error) as exc:
        row.update(ended=time.monotonic(), error=str(exc))
        log.warning("flow %d to %s: %s", flow["id"], flow["dst"], exc)
    return row


def run_flows(flows: list[dict], peers: dict[str, list], t0: float, cc: str | None, timeout_s: float) -> list[dict]:
    """Start each flow at t0 + its start_s on a thread of its own; return the rows when all have ended."""
    payload = memoryview(bytes(BLOCK))
    rows: list[dict] = []
    lock = threading.Lock()
    threads = []

    def one(flow: dict) -> None:
        ip, port = peers[flow["dst"]]
        row = send_flow(flow, (str(ip), int(port)), cc, timeout_s, payload)
        with lock:
            rows.append(row)

    for flow in sorted(flows, key=lambda f: f["start_s"]):
        delay = t0 + flow["start_s"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        thread = threading.Thread(target=one, args=(flow,), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(filename=args.log_file, level=logging.INFO,
                        format="%(asctime)s flows %(process)d %(levelname)s %(message)s")
    sink = Sink(args.ip, args.timeout_s)
    control = Control(args.control)
    control.send({"hello": args.index, "port": sink.port})
    try:
        while True:
            message = control.recv()
            if "exit" in message:
                break
            if "plan" in message:
                plan = message["plan"]
                log.info("%d flows to send from t0 %.3f", len(plan["flows"]), plan["t0"])
                control.send({"sent": run_flows(plan["flows"], plan["peers"], plan["t0"], args.cc, args.timeout_s)})
            elif "report" in message:
                with sink.lock:
                    control.send({"received": list(sink.rows)})
    finally:
        sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
