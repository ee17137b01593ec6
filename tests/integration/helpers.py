"""Helpers for integration tests: leftovers checks, UDP flow sender, iperf3 runs, a Prometheus server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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


PROMETHEUS = Path(sys.prefix) / "prometheus/usr/bin/prometheus"  # `make deps` unpacks Debian's binary there


class Prometheus:
    """A Prometheus server's query API (on 127.0.0.1)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def answer(self, expr: str) -> dict:
        q = urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/query?{q}", timeout=2) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # refused: its reason (JSON), or not ready yet (503, text)
            body = exc.read()
            try:
                return json.loads(body)
            except ValueError:
                return {"status": f"http {exc.code}", "body": body[:200].decode(errors="replace")}
        except OSError:
            return {"status": "unreachable"}  # not listening yet

    def query(self, expr: str) -> list[dict]:
        return self.answer(expr).get("data", {}).get("result", [])


@contextmanager
def prometheus(metrics_url: str, work: Path, log_path: Path) -> Iterator[Prometheus]:
    """Debian's Prometheus scraping `metrics_url` every second, its API on a free 127.0.0.1 port;
    the test skips when `make deps` has not unpacked it."""
    if not PROMETHEUS.exists():
        pytest.skip(f"no {PROMETHEUS}: `make deps` unpacks Debian's prometheus there")
    target = metrics_url.removeprefix("http://").removesuffix("/metrics")
    with socket.socket() as s:  # a free port for Prometheus's own API
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: starnet\n    static_configs: [{{targets: ['{target}']}}]\n")
    with log_path.open("w") as log:
        server = subprocess.Popen([str(PROMETHEUS), f"--config.file={work / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            yield Prometheus(port)
        finally:
            server.terminate()
            server.wait(10)

