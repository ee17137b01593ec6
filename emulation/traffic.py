"""Traffic between Mininet hosts that the CLI and the tests share."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from mininet.node import Host


def start_iperf3_server(server: Host, port: int, timeout_s: float = 5.0) -> None:
    """A one-shot iperf3 server on `port` of Mininet host `server`, listening when this returns."""
    server.cmd(f"iperf3 -s -1 -D -p {port} --logfile /dev/null")
    deadline = time.monotonic() + timeout_s
    while f":{port}" not in server.cmd(f"ss -ltnH 'sport = :{port}'"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"iperf3 server on {server.name}:{port} not listening after {timeout_s:.0f} s")
        time.sleep(0.1)



def iperf3_rates(out: str, what: str) -> tuple[float, float]:
    """(receiver goodput, sender rate) in Mbit/s from iperf3 -J output; what names the flow in errors."""
    try:
        end = json.loads(out[out.index("{"):])["end"]
        return end["sum_received"]["bits_per_second"] / 1e6, end["sum_sent"]["bits_per_second"] / 1e6
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"iperf3 {what} failed: {out.strip()[-300:]}") from exc


def iperf3_tcp(client: Host, server: Host, seconds: int = 5, port: int = 5201,
               address: str | None = None) -> tuple[float, float]:
    """One iperf3 TCP flow client → server (to `address`, default its NIC's): (receiver goodput,
    sender rate) in Mbit/s.

    iperf3 rather than Mininet's iperf: Mininet waits for an iperf 2 report on its telnet probe,
    which iperf 2.1 (Debian 12) does not print, so `iperf` in the stock CLI never returns."""
    start_iperf3_server(server, port)
    out = client.cmd(f"iperf3 -c {address or server.IP()} -p {port} -t {seconds} -J")
    return iperf3_rates(out, f"{client.name} -> {server.name}")


def iperf3_parallel(pairs: Sequence[tuple[Host, Host]], seconds: int, out_dir: Path, base_port: int = 5301,
                    omit_s: int = 0, tag: str = "") -> list[tuple[float, float]]:
    """Several iperf3 TCP flows at once, one per (client, server) pair; their rates as iperf3_tcp's.

    omit_s: seconds at the start left out of the rates (slow start); tag: names this run's files."""
    outputs = []
    for i, (_, server) in enumerate(pairs):
        start_iperf3_server(server, base_port + i)
    for i, (client, server) in enumerate(pairs):
        path = out_dir / f"iperf3{tag}-{client.name}-{server.name}.json"
        client.cmd(f"iperf3 -c {server.IP()} -p {base_port + i} -t {seconds} -O {omit_s} -J > {path} 2>&1 &")
        outputs.append((path, f"{client.name} -> {server.name}"))
    deadline = time.monotonic() + seconds + omit_s + 15
    results = []
    for path, what in outputs:
        while time.monotonic() < deadline:
            text = path.read_text() if path.exists() else ""
            if text.rstrip().endswith("}"):
                break
            time.sleep(0.2)
        results.append(iperf3_rates(path.read_text(), what))
    return results
