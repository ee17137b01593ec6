"""The host pacer on a real interface (hostagent/pacer.py, through netlink), in a network namespace
of the test's own: a paced destination's TBF holds ~20 ms of data; a destination advised its line
rate (or cleared) is unpaced with the queue an unadvised one has (a paced sender stalled longer
than 20 ms idles its link: a PyTorch all-reduce alone on its paths lost up to a third of its
bandwidth paced at 0.99 of its NIC)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.root]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINE_BPS = 20e6
DST = "10.9.0.2"

PROBE = textwrap.dedent(f"""
    import subprocess, sys
    sys.path.insert(0, {ROOT!r})
    from hostagent.pacer import HtbPacer
    pacer = HtbPacer("pa", {LINE_BPS})
    def tbf():
        out = subprocess.run(["tc", "qdisc", "show", "dev", "pa"], capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if line.startswith("qdisc tbf")]
    for rate in (5e6, {LINE_BPS}, 3e6, 0, 40e6):
        pacer.set_rate({DST!r}, rate)
        print(rate, pacer.rates[{DST!r}], tbf()[0])
    pacer.close()
""")


@pytest.fixture
def namespace():
    name = f"starnet-test-pacer-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "pa", "type", "veth", "peer", "name", "pb"], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", "pa", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


def test_a_paced_destination_holds_20_ms_an_unpaced_one_the_default_queue(namespace):
    result = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", PROBE], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [line.split(" ", 2) for line in result.stdout.splitlines()]
    assert [float(r[1]) for r in rows] == [5e6, 0, 3e6, 0, 0]  # the line rate or more: unpaced
    # tc shows a TBF's limit as the latency it allows: (limit - burst) * 8 / rate
    lat_ms = [float(re.search(r"lat ([\d.]+)ms", r[2]).group(1)) for r in rows]  # type: ignore[union-attr]
    assert lat_ms[0] == pytest.approx((5e6 / 8 * 0.02 - 1600) * 8 / 5e6 * 1000, rel=0.05)  # ~20 ms at 5 Mbit/s
    assert lat_ms[2] == pytest.approx((8 * 1514 - 1600) * 8 / 3e6 * 1000, rel=0.05)  # at least 8 frames
    for unpaced in (1, 3, 4):
        assert "rate 20Mbit" in rows[unpaced][2], rows[unpaced]
        assert lat_ms[unpaced] == pytest.approx((1000 * 1514 - 1600) * 8 / LINE_BPS * 1000, rel=0.05), rows[unpaced]
