"""A link cut's actuation (emulation/net.py set_ports) on a veth pair of its own: through netlink,
at real-time priority in a thread of its own — also from a thread where an asyncio loop runs, as
Playwright's does in the live page's test (pyroute2's IPRoute refuses to start in one)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from emulation import net
from emulation.net import set_ports
from wire.linkstate import read_carrier
from wire.realtime import DEFAULT_PRIORITY

pytestmark = [pytest.mark.root]


@pytest.fixture()
def pair():
    ours, peer = f"sp{os.getpid() % 100000}a", f"sp{os.getpid() % 100000}b"
    subprocess.run(["ip", "link", "add", ours, "type", "veth", "peer", "name", peer], check=True)
    try:
        for name in (ours, peer):
            subprocess.run(["ip", "link", "set", name, "up"], check=True)
        yield ours, peer
    finally:
        subprocess.run(["ip", "link", "del", ours], check=False)


def test_a_port_goes_down_and_up_from_inside_a_running_event_loop(pair):
    ours, peer = pair

    async def cut_and_restore() -> tuple[list[float], bool, list[float]]:
        down = set_ports([ours], "down", DEFAULT_PRIORITY, time.time)
        carrier = read_carrier(peer)  # the peer's carrier goes with our end, as a cable's
        up = set_ports([ours], "up", DEFAULT_PRIORITY, time.time)
        return down, carrier, up

    before = time.time()
    down, carrier_while_down, up = asyncio.run(cut_and_restore())
    assert len(down) == len(up) == 1 and before <= down[0] <= up[0]
    assert not carrier_while_down
    assert Path(f"/sys/class/net/{ours}/operstate").read_text().strip() != "down"
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's thread never changed


def test_a_port_that_is_not_there_is_named_in_the_error():
    with pytest.raises(net.TestbedError, match="nosuchport0"):
        set_ports(["nosuchport0"], "down", 0, time.time)
