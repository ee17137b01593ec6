"""Traffic between Mininet hosts that the CLI and the tests share."""

from __future__ import annotations

import json
import time


def iperf3_tcp(client, server, seconds: int = 5, port: int = 5201) -> tuple[float, float]:
    """One iperf3 TCP flow client → server: (receiver goodput, sender rate) in Mbit/s.

    iperf3 rather than Mininet's iperf: Mininet waits for an iperf 2 report on its telnet probe,
    which iperf 2.1 (Debian 12) does not print, so `iperf` in the stock CLI never returns."""
    server.cmd(f"iperf3 -s -1 -D -p {port} --logfile /dev/null")
    deadline = time.monotonic() + 5
    while f":{port}" not in server.cmd(f"ss -ltnH 'sport = :{port}'") and time.monotonic() < deadline:
        time.sleep(0.1)
    out = client.cmd(f"iperf3 -c {server.IP()} -p {port} -t {seconds} -J")
    try:
        end = json.loads(out[out.index("{"):])["end"]
        return end["sum_received"]["bits_per_second"] / 1e6, end["sum_sent"]["bits_per_second"] / 1e6
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"iperf3 {client.name} -> {server.name} failed: {out.strip()[-300:]}") from exc
