"""INT telemetry on a dumbbell: two TCP flows into one 20 Mbit/s bottleneck, seen by the collector."""

from __future__ import annotations

import csv
import json
import threading
import time

import pytest

from emulation.fidelity import Verdict
from emulation.net import Testbed
from emulation.switchproc import bmv2_missing
from emulation.traffic import iperf3_parallel
from lab.incast import measure_faithfully
from tests.checks import assert_within, wait_until
from topologies import dumbbell
from wire.adviceclient import get_state

pytestmark = [pytest.mark.mininet, pytest.mark.root]

BOTTLENECK = ("s1", "3")  # s1's port toward s2
ECN_THRESHOLD = 64 // 4


RECEIVED_MIN_MBPS = 10.0  # behaviour (both flows get through); the 90% goal is the bench's
INSTANT_TOLERANCE = 0.20  # one reading vs the receivers' average over the run
MEAN_TOLERANCE = 0.10  # the readings' mean over the run vs the receivers' average
# A sink port's tx_bytes count whole frames, iperf3 payload: a full segment is 1448 B of payload in
# 1514 on the wire (Ethernet, IPv4, TCP with timestamps). Measured: INT/receiver 1.036-1.063.
FRAME_PER_PAYLOAD = 1514 / 1448


def both_flows_seen(tb: Testbed, since: float) -> bool:
    state = get_state(tb.run_dir, include_flows=True)
    flows = [f for f in state.flows if f.dst_port >= 5301 and f.age_s < tb.now() - since]
    return len(flows) >= 2 and any((p.switch, str(p.port)) == BOTTLENECK and p.has_rate for p in state.ports)


@pytest.fixture(scope="module", params=["soft", "bmv2"])
def run(request):
    if request.param == "bmv2" and bmv2_missing():
        pytest.skip(f"{' and '.join(bmv2_missing())} not found: BMv2 runs where p4lang's packages are installed")
    # Mode bbr: steady senders, so a reading taken at any moment is comparable with the receivers'
    # average (cubic's sawtooth moves each flow's rate by ±30% and INT samples per packet, which
    # weighs its fast moments more: +14% on one sink port in one run).
    with Testbed(dumbbell(2), dataplane=request.param, name=f"test-telemetry-{request.param}", mode="bbr") as tb:
        # The queue test reads only the faithful windows: a run the machine mostly stalled (7% of its
        # windows faithful in one) is measured once more and the more faithful of the two kept.
        attempts = iter(("", "-again"))
        result, states, verdict, tag = measure_faithfully(lambda: measure(tb, next(attempts)), lambda r: r[2],
                                                          best=True)
        yield tb, result, states, verdict, tag
    # (the Testbed context has torn everything down here)


def measure(tb: Testbed, tag: str) -> tuple[list, list, Verdict, str]:
    """Two 8 s flows through the bottleneck: the receivers' rates, three collector states 0.5 s
    apart once both flows share it, the fidelity verdict of the seconds they ran, and the tag
    naming its iperf3 reports."""
    pairs = [(tb.host("h1"), tb.host("h3")), (tb.host("h2"), tb.host("h4"))]
    result: list = []
    started = tb.now()
    flows = threading.Thread(target=lambda: result.extend(
        iperf3_parallel(pairs, seconds=8, out_dir=tb.run_dir, tag=tag)))
    flows.start()
    assert wait_until(lambda: both_flows_seen(tb, started), 5.0), "the collector never saw both flows"
    # Past slow start, both flows share the bottleneck: three readings 0.5 s apart.
    wait_until(lambda: tb.now() >= started + 3.0, 5.0)
    states = []
    for _ in range(3):
        states.append(get_state(tb.run_dir, include_flows=True))
        time.sleep(0.5)  # the sampling interval, not a wait for anything
    flows.join(30)
    return result, states, tb.verdict(started, tb.now(), ["s1", "s2"]), tag


def series(tb: Testbed, verdict: Verdict) -> dict[tuple[str, str], list[dict]]:
    """The collector's readings per (switch, port) in the measured seconds (a repeated measurement
    shares the run's telemetry.csv with the one before)."""
    rows: dict[tuple[str, str], list[dict]] = {}
    with (tb.run_dir / "telemetry.csv").open() as f:
        for row in csv.DictReader(f):
            if verdict.t0 <= float(row["time"]) <= verdict.t1:
                rows.setdefault((row["switch"], row["port"]), []).append(row)
    return rows


def test_collector_utilisation_matches_the_receivers(run):
    tb, rates, states, verdict, _ = run
    received = sum(r for r, _ in rates)
    assert received > RECEIVED_MIN_MBPS, rates
    readings = sorted((p for state in states for p in state.ports if (p.switch, str(p.port)) == BOTTLENECK),
                      key=lambda p: p.tx_rate_mbps)
    assert len(readings) == 3 and all(p.has_rate for p in readings)
    bottleneck = readings[1]  # the median of the three
    assert_within(bottleneck.tx_rate_mbps, received, INSTANT_TOLERANCE * received,
                  what=f"median bottleneck reading (Mbit/s); {verdict.line()}")
    rows = [r for r in series(tb, verdict)[BOTTLENECK] if r["tx_rate_mbps"]]
    # Over the run (first and last second excluded), the rate readings agree with the receivers.
    middle = rows[len(rows) // 8: -len(rows) // 8]
    mean = sum(float(r["tx_rate_mbps"]) for r in middle) / len(middle)
    assert_within(mean, received, MEAN_TOLERANCE * received, what=f"mean bottleneck reading (Mbit/s); {verdict.line()}")
    print(f"receivers {received:.2f} Mbit/s, collector {mean:.2f} Mbit/s mean, "
          f"{bottleneck.tx_rate_mbps:.2f} latest, utilisation {bottleneck.utilisation:.2f}; {verdict.line()}")


def receiver_intervals(tb: Testbed, client: str, server: str, tag: str) -> list[tuple[float, float, float]]:
    """The receiver's 1 s intervals from iperf3's JSON: (start s, end s after the flow began, Mbit/s)."""
    report = json.loads((tb.run_dir / f"iperf3{tag}-{client}-{server}.json").read_text())
    return [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bits_per_second"] / 1e6) for i in report["intervals"]]


def test_sink_port_rates_match_each_receiver(run):
    """At a sink port the switch's own hop is the report's last: on BMv2 it is read from registers
    (the report is an ingress clone) and used to pair the latest tx_bytes with the timestamp of the
    last INT packet only, which made these readings scatter (p10 4 of 10 Mbit/s) and run low.

    Compared over the seconds both flows ran: the second flow may start a second late (its SYN
    lost in the first one's slow start: one initial RTO), and while alone the first takes the
    whole bottleneck — a whole-run average of the receiver is then not what the sink port carried
    in the shared part (INT 7.87 against 8.91 Mbit/s in one run, 7.75 against 7.82 when aligned)."""
    tb, _, _, verdict, tag = run
    rows = series(tb, verdict)
    pairs = (("h1", "h3"), ("h2", "h4"))
    readings: dict[str, list[tuple[float, float]]] = {}
    for _, host in pairs:
        port = str(tb.topo.find_link("s2", host).port_of("s2"))
        readings[host] = [(float(r["time"]), float(r["tx_rate_mbps"]))
                          for r in rows[("s2", port)] if r["tx_rate_mbps"]]
        assert readings[host], f"no rate readings on s2:{port} toward {host}"
    began = {host: seen[0][0] for host, seen in readings.items()}  # the flow's first INT report
    # Both running, past the first flow's slow start, before either ends
    shared = (max(began.values()) + 1.0, min(seen[-1][0] for seen in readings.values()) - 1.0)
    assert shared[1] - shared[0] >= 3.0, f"the flows overlapped {shared[1] - shared[0] + 2:.1f} s only: {began}"
    for client, host in pairs:
        # Receiver intervals wholly inside the shared seconds (iperf3 counts from its flow's start)
        inside = [mbps for start, end, mbps in receiver_intervals(tb, client, host, tag)
                  if began[host] + start >= shared[0] - 0.5 and began[host] + end <= shared[1] + 0.5]
        assert len(inside) >= 2, f"{client} -> {host}: {len(inside)} receiver intervals in the shared seconds"
        received = FRAME_PER_PAYLOAD * sum(inside) / len(inside)  # on the wire
        middle = sorted(mbps for t, mbps in readings[host] if shared[0] <= t <= shared[1])
        assert len(middle) >= 20, f"{len(middle)} rate readings toward {host} while both flows ran"
        mean = sum(middle) / len(middle)
        assert_within(mean, received, MEAN_TOLERANCE * received,
                      what=f"mean sink-port reading toward {host} (Mbit/s) while both flows ran; {verdict.line()}")
        p10 = middle[len(middle) // 10]
        assert p10 >= (1 - 2 * INSTANT_TOLERANCE) * received, (host, p10, received, verdict.line())


def test_queue_readings_rise_at_the_bottleneck_only(run):
    tb, _, _, verdict, _ = run
    rows = series(tb, verdict)
    bottleneck_peak = max(int(r["queue_pkts"]) for r in rows[BOTTLENECK])
    assert bottleneck_peak > ECN_THRESHOLD, bottleneck_peak
    for port in ("1", "2"):  # s2's host ports: ~10 of 20 Mbit/s each
        # When a switch is scheduled late, the frames that waited in its socket arrive at once and
        # queue briefly: the monitor flags those windows. In faithful ones the host ports carry
        # half a link each and hardly queue; a congested port is never this low.
        readings = sorted(int(r["queue_pkts"]) for r in rows[("s2", port)] if verdict.is_faithful(float(r["time"])))
        assert len(readings) >= 20, f"{len(readings)} faithful readings on s2:{port}; {verdict.line()}"
        p95 = readings[int(0.95 * (len(readings) - 1))]
        assert p95 <= 1 and readings[-1] < ECN_THRESHOLD, (port, p95, readings[-1], verdict.line())


def test_flow_paths_cross_the_bottleneck(run):
    _, _, states, _, _ = run
    forward = [f for f in states[-1].flows if f.dst in ("10.0.2.1", "10.0.2.2") and f.dst_port >= 5301]
    assert len(forward) >= 2
    for flow in forward:
        assert [(h.switch, h.egress_port) for h in flow.hops][0] == ("s1", 3)
        assert flow.hops[-1].switch == "s2"
