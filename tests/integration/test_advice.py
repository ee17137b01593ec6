"""Proactive rate advice on the default fabric: incast 6→1 with and without it, and a controller restart.

Queue and drop bounds are asserted over the faithful 100 ms windows of the measurement (no switch
had a late event, testbed/fidelity.py); a measurement with fewer than half of its windows faithful
is repeated once, then fails with the verdict. The goal figures (p99 ≤ 5 packets, 0 drops in 9 of
10 runs) are measured by bench/incast_fidelity.py; these are behavioural bounds with margins.
"""

from __future__ import annotations

import csv

import pytest

from controller.service import channel
from testbed.incast import RECEIVER, measure_faithfully, pacing_cleared, run_incast
from testbed.net import Testbed
from testbed.traffic import start_iperf3_server
from tests.integration.helpers import wait_until
from topologies import leafspine
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.mininet, pytest.mark.root]

P99_QUEUE_MAX = 10  # packets, faithful windows; the goal (5) is bench/incast_fidelity.py's
UTILISATION_MIN = 0.90  # η = 0.95 minus measurement noise
# Every flow within 30% of the mean goodput, and Jain >= 0.98 over all six. Equal advice does not give
# goodputs equal to 10% over 8 s of TCP behind HTB: in 1 of 3 repeats here five flows got 3.03 Mbit/s
# and one 3.78 (+20%; Jain 0.993) under the same 3.17 Mbit/s advice. A starved flow (−35% or worse)
# still fails both.
FAIR_SHARE_TOLERANCE = 0.30


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(), dataplane="soft", name="test-advice", mode="advice") as tb:
        yield tb


def set_mode(tb: Testbed, mode: str) -> None:
    with channel(tb.run_dir) as ch:
        assert pb_grpc.AdviceStub(ch).SetMode(pb.ModeRequest(mode=mode), timeout=5).mode == mode


def test_incast_with_advice_has_no_queue_and_fair_shares_then_without_it(fabric):
    advice = measure_faithfully(lambda: run_incast(fabric, "advice", "-advice"), lambda r: r.verdict)
    set_mode(fabric, "none")
    try:
        assert wait_until(lambda: pacing_cleared(fabric), 5.0), \
            "advice was not cleared within 5 s of mode none"
        plain = run_incast(fabric, "none", "-none")
    finally:
        set_mode(fabric, "advice")
    a, n = advice.summary(), plain.summary()
    print("\n  incast 6->1, 20 Mbit/s bottleneck    advice     none")
    for key in ("p99_queue_faithful", "p90_queue_faithful", "p99_queue_all", "drops_faithful", "jain",
                "utilisation_faithful", "readings_faithful", "faithful_share"):
        print(f"  {key:34} {a[key]!s:>8} {n[key]!s:>8}")
    print(f"  drops in flagged windows (t: drops) advice {a['drops_flagged']}  none {n['drops_flagged']}")
    print(f"  advice: {a['fidelity']}\n  none:   {n['fidelity']}")
    assert len(advice.queues_faithful) > 30, a
    assert advice.p(0.99) <= P99_QUEUE_MAX, a
    assert advice.drops_faithful == 0, a
    assert advice.p(0.99) < plain.p(0.99, faithful=False), (a, n)
    mean = sum(advice.rates) / len(advice.rates)
    assert all(abs(r - mean) <= FAIR_SHARE_TOLERANCE * mean for r in advice.rates), advice.rates
    assert advice.jain >= 0.98, a
    assert advice.utilisation >= UTILISATION_MIN, a


def test_controller_restart_agents_fall_back_reconnect_and_advice_resumes(fabric):
    h1, h5 = fabric.host("h1"), fabric.host(RECEIVER)
    records = fabric.run_dir / "hostagents" / "h1.csv"

    def advice_rows_after(t: float) -> list[dict]:
        with records.open() as f:
            return [r for r in csv.DictReader(f) if r["event"] == "advice" and float(r["applied"]) > t]

    start_iperf3_server(h5, 5401)
    started = fabric.now()
    h1.cmd(f"iperf3 -c {h5.IP()} -p 5401 -t 12 > /dev/null 2>&1 &")
    assert wait_until(lambda: advice_rows_after(started), 5.0), "no advice applied before the restart"
    restart = fabric.now()
    fabric.restart_controller()
    assert wait_until(lambda: advice_rows_after(restart), 8.0), "advice did not resume after the controller restart"
    log = (fabric.run_dir / "hostagents" / "h1.log").read_text()
    assert "controller unreachable" in log and log.count("registered") >= 2
    assert all(proc.poll() is None for proc in fabric.agents.values()), "a host agent died"
