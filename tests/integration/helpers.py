"""Helpers for integration tests: leftovers checks, UDP flow sender, iperf3 runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from emulation.rundir import process_start_time
from tests.checks import assert_within, wait_until  # noqa: F401  (re-exported for the tests)

LEAFSPINE_LINK_PREFIXES = ("s1-", "s2-", "s3-", "s4-")  # the default fabric's switch interfaces


def links_named(prefixes: tuple[str, ...]) -> list[str]:
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    names = [line.split()[0].split("@")[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefixes)]


def pid_alive(pid: int, start: str) -> bool:
    return process_start_time(pid) == start


UDP_SENDER = Path(__file__).with_name("udp_sender.py")


def send_udp(host, dst_ip: str, sport: int, count: int) -> None:
    host.cmd(f"{sys.executable} {UDP_SENDER} {dst_ip} {sport} {count}")


def is_root() -> bool:
    return os.geteuid() == 0


def unreachable_pairs(net, timeout_s: int = 2, attempts: int = 3) -> list[tuple[str, str]]:
    """Ordered host pairs whose ping fails `attempts` times in a row (one echo each, `timeout_s`
    each): a stall of the shared machine can lose one echo's deadline, a missing route loses all."""
    failing = []
    for src in net.hosts:
        for dst in net.hosts:
            if src is dst:
                continue
            for _ in range(attempts):
                if " 1 received" in src.cmd(f"ping -c1 -W{timeout_s} {dst.IP()}"):
                    break
            else:
                failing.append((src.name, dst.name))
    return failing
