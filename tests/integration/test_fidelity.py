"""The fidelity monitor catches a deliberate stall: one switch process stopped (SIGSTOP) for 50 ms
during a TCP flow is flagged on that switch, in the windows that hold the stall, with a worst
lateness close to the stall's length, and the verdict names it."""

from __future__ import annotations

import os
import signal
import time

import pytest

from emulation.fidelity import read_records
from emulation.net import Testbed
from emulation.traffic import start_iperf3_server
from tests.integration.helpers import assert_within, wait_until
from topologies import dumbbell
from wire.fidelity import WINDOW_S

pytestmark = [pytest.mark.mininet, pytest.mark.root]

STALL_S = 0.050
LATENESS_TOLERANCE_MS = 15.0  # what the switch reports vs the stall we measured around the signals
OVERSLEPT_MS = 10.0  # a stall that took longer to undo than this over STALL_S is this process's lateness


@pytest.fixture(scope="module")
def fabric():
    with Testbed(dumbbell(1), dataplane="soft", name="test-fidelity", agents=False) as tb:
        yield tb


def frames_seen(tb: Testbed, switch: str, since: float) -> bool:
    return any(r.source == switch and r.events and r.start >= since for r in read_records(tb.fidelity_path))


def stall_s1(fabric: Testbed, port: int) -> tuple[float, float, float]:
    """A 4 s flow through s1; s1 stopped for STALL_S in its middle: (stall ms as this process
    measured it around the signals, when it stopped, when it resumed), once s1 wrote records after."""
    h1, h2 = fabric.host("h1"), fabric.host("h2")
    start_iperf3_server(h2, port)
    h1.cmd(f"iperf3 -c {h2.IP()} -p {port} -t 4 > /dev/null 2>&1 &")
    began = fabric.now()
    assert wait_until(lambda: frames_seen(fabric, "s1", began + 0.5), 5.0), "the flow did not reach s1"
    pid = fabric.switches["s1"].proc.pid
    before = time.monotonic()
    stopped_at = fabric.now()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(STALL_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    stall_ms = (time.monotonic() - before) * 1000
    resumed_at = fabric.now()
    # s1 writes a window's record when the next one begins: wait for one well after the stall.
    assert wait_until(lambda: frames_seen(fabric, "s1", resumed_at + 0.3), 5.0), "s1 wrote no records after"
    h1.cmd("wait")  # the flow's end, before another may start (on a port of its own)
    return stall_ms, stopped_at, resumed_at


def test_a_stopped_switch_is_flagged_on_that_switch_with_its_stall(fabric):
    stall_ms, stopped_at, resumed_at = stall_s1(fabric, 5201)
    if stall_ms > STALL_S * 1000 + OVERSLEPT_MS:
        # this process woke late (the machine was busy: 86 ms for a 50 ms sleep, 0.65 of a core taken
        # by other work, in one gate), so the stall it measured is not the one s1 saw: once more
        print(f"\n  the stall took {stall_ms:.1f} ms to undo, not {STALL_S * 1000:.0f}: measuring again")
        stall_ms, stopped_at, resumed_at = stall_s1(fabric, 5202)
    held = range(int(stopped_at / WINDOW_S), int(resumed_at / WINDOW_S) + 1)
    verdict = fabric.verdict(stopped_at - 1.0, resumed_at + 1.0, ["s1", "s2"])
    print(f"\n  stall {stall_ms:.1f} ms; {verdict.line()}")
    for line in verdict.flagged_lines():
        print(f"  flagged {line}")
    unflagged = [w for w in held if "s1" not in verdict.flagged.get(w, set())]
    assert not unflagged, f"windows holding the stall not flagged on s1: {unflagged}; {verdict.line()}"
    assert verdict.worst_source == "s1", verdict.line()
    assert_within(verdict.worst_ms, stall_ms, LATENESS_TOLERANCE_MS, what="worst lateness on s1 (ms)")
    assert "on s1 " in verdict.line(), verdict.line()
