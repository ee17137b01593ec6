"""Proactive rate advice on the default fabric: incast 6→1 with and without it, and a controller restart."""

from __future__ import annotations

import csv
import statistics
import threading
import time

import pytest

from controller.advisor import jain_index
from controller.proto import advice_pb2 as pb
from controller.proto import advice_pb2_grpc as pb_grpc
from controller.service import channel
from testbed.net import Testbed
from testbed.traffic import iperf3_parallel
from topologies import leafspine

pytestmark = [pytest.mark.mininet, pytest.mark.root]

SENDERS = ["h1", "h2", "h3", "h4", "h6", "h7"]  # both leaves
RECEIVER = "h5"
BOTTLENECK = ("s4", "1")  # s4's port to h5
SECONDS, OMIT = 8, 3  # the slow-start queue has drained within 3 s on every run seen (CI: 2.75 s)


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(), dataplane="soft", name="test-advice", mode="advice") as tb:
        yield tb


def set_mode(tb: Testbed, mode: str) -> None:
    with channel(tb.run_dir) as ch:
        assert pb_grpc.AdviceStub(ch).SetMode(pb.ModeRequest(mode=mode), timeout=5).mode == mode


def incast(tb: Testbed, tag: str) -> dict:
    receiver = tb.host(RECEIVER)
    started = time.time()
    results: list = []
    flows = threading.Thread(target=lambda: results.extend(iperf3_parallel(
        [(tb.host(s), receiver) for s in SENDERS], SECONDS, tb.run_dir, omit_s=OMIT, tag=tag)))
    flows.start()
    time.sleep(OMIT + 0.5)  # slow start is over and advice is in force: count drops from here
    drops_before = tb.switch_stats("s4")["ports"]["1"]["queue_drops"]
    flows.join(SECONDS + OMIT + 30)
    rates = [r for r, _ in results]
    ended = time.time()
    time.sleep(0.6)  # the stats file is rewritten every 0.5 s
    drops = tb.switch_stats("s4")["ports"]["1"]["queue_drops"] - drops_before
    window = (started + OMIT + 0.5, ended - 0.5)
    queues, utilisation, per_second = [], [], {}
    with (tb.run_dir / "telemetry.csv").open() as f:
        for row in csv.DictReader(f):
            t = float(row["time"])
            if (row["switch"], row["port"]) == BOTTLENECK and window[0] <= t <= window[1]:
                queues.append(int(row["queue_pkts"]))
                per_second.setdefault(int(t - window[0]), []).append(int(row["queue_pkts"]))
                if row["utilisation"]:
                    utilisation.append(float(row["utilisation"]))
    return {"rates": rates, "drops": drops, "p99_queue": percentile(queues, 0.99),
            "p90_queue": percentile(queues, 0.90),
            "p99_per_second": statistics.median(percentile(v, 0.99) for v in per_second.values()),
            "utilisation": sum(utilisation) / len(utilisation), "jain": jain_index(rates), "readings": len(queues)}


def percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[int(p * (len(ordered) - 1))]


def test_incast_with_advice_has_no_queue_and_fair_shares_then_without_it(fabric):
    advice = incast(fabric, "-advice")
    set_mode(fabric, "none")
    try:
        time.sleep(2.5)  # advice expires or is cleared: hosts back at line rate
        plain = incast(fabric, "-none")
    finally:
        set_mode(fabric, "advice")
    print("\n  incast 6->1, 20 Mbit/s bottleneck    advice     none")
    for key, fmt in (("p99_queue", "{:>8}"), ("p90_queue", "{:>8}"), ("p99_per_second", "{:>8}"), ("drops", "{:>8}"),
                     ("jain", "{:8.3f}"), ("utilisation", "{:8.2f}")):
        print(f"  {key:34} {fmt.format(advice[key])} {fmt.format(plain[key])}")
    print(f"  {'sender Mbit/s':34} {' '.join(f'{r:.2f}' for r in advice['rates'])} | "
          f"{' '.join(f'{r:.2f}' for r in plain['rates'])}")
    assert advice["readings"] > 50, advice
    # Six paced senders at η = 0.95 leave the bottleneck a p99 of 3-6 packets on a quiet machine.
    # A stall of the shared 2-core VM (tens of ms, now and then) can lift the p99 of a whole run
    # (one CI run: 33, p90 4); the typical second and the bulk of the readings are what we bound.
    assert advice["p99_per_second"] <= 10, advice
    assert advice["p90_queue"] <= 5, advice
    assert advice["p99_queue"] < plain["p99_queue"], (advice, plain)
    assert advice["drops"] == 0, advice
    mean = sum(advice["rates"]) / len(advice["rates"])
    assert all(abs(r - mean) <= 0.10 * mean for r in advice["rates"]), advice["rates"]
    assert advice["jain"] >= 0.98, advice
    assert advice["utilisation"] >= 0.90, advice


def test_controller_restart_agents_fall_back_reconnect_and_advice_resumes(fabric):
    h1, h5 = fabric.host("h1"), fabric.host(RECEIVER)
    records = fabric.run_dir / "hostagents" / "h1.csv"

    def advice_rows_after(t: float) -> list[dict]:
        with records.open() as f:
            return [r for r in csv.DictReader(f) if r["event"] == "advice" and float(r["applied"]) > t]

    h5.cmd("iperf3 -s -1 -D -p 5401 --logfile /dev/null")
    time.sleep(0.3)
    h1.cmd(f"iperf3 -c {h5.IP()} -p 5401 -t 12 > /dev/null 2>&1 &")
    time.sleep(2)
    assert advice_rows_after(time.time() - 2), "no advice applied before the restart"
    restart = time.time()
    fabric.restart_controller()
    deadline = time.monotonic() + 8
    while not advice_rows_after(restart) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert advice_rows_after(restart), "advice did not resume after the controller restart"
    log = (fabric.run_dir / "hostagents" / "h1.log").read_text()
    assert "controller unreachable" in log and log.count("registered") >= 2
    assert all(proc.poll() is None for proc in fabric.agents.values()), "a host agent died"
