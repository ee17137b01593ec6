"""Send UDP frames as fast as one Python core can, over an AF_PACKET socket.

    udp_blast.py IFACE --src-mac M --dst-mac M --src-ip A --dst-ip B --size N --seconds S [--flows F]

`--size` is the Ethernet frame without FCS (60 = the 64 B minimum frame on the wire). Frames cycle
over F source ports, so a switch sees F flows. Prints one JSON line: frames sent and seconds taken.
"""

from __future__ import annotations

import argparse
import json
import socket
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

CHECK_EVERY = 2048


def build_frames(args: argparse.Namespace) -> list[bytes]:
    frames = []
    for i in range(args.flows):
        header = Ether(src=args.src_mac, dst=args.dst_mac) / IP(src=args.src_ip, dst=args.dst_ip, ttl=64) / \
            UDP(sport=10000 + i, dport=9)
        pad = max(0, args.size - len(header))
        frames.append(bytes(header / (b"\x00" * pad)))
    return frames


def blast(iface: str, frames: list[bytes], seconds: float) -> tuple[int, float]:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((iface, 0))
    send = sock.send
    sent = 0
    started = time.monotonic()
    deadline = started + seconds
    batch = (frames * (CHECK_EVERY // len(frames) + 1))[:CHECK_EVERY]
    while time.monotonic() < deadline:
        for frame in batch:
            try:
                send(frame)
            except BlockingIOError:
                continue
            except OSError:
                continue  # no buffer space: the frame is lost, as a NIC would drop it
            sent += 1
    return sent, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("iface")
    parser.add_argument("--src-mac", required=True)
    parser.add_argument("--dst-mac", required=True)
    parser.add_argument("--src-ip", required=True)
    parser.add_argument("--dst-ip", required=True)
    parser.add_argument("--size", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--flows", type=int, default=64)
    args = parser.parse_args()
    sent, elapsed = blast(args.iface, build_frames(args), args.seconds)
    print(json.dumps({"sent": sent, "seconds": elapsed}))


if __name__ == "__main__":
    main()
