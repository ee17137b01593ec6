"""The controller's Prometheus /metrics (controller/metrics.py): served on 127.0.0.1 only, in the text
format Prometheus parses, every family it documents, labels from the topology and never from flows."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from controller.localizer import Suspect
from controller.metrics import (
    COUNTERS,
    HISTOGRAMS,
    METRICS,
    Exposition,
    FabricMetrics,
    FabricState,
    on_loop,
    serve,
)
from wire.fidelity import WINDOW_S, FidelityTail, FidelityWindows, create_file


def state() -> FabricState:
    return FabricState(
        ports={("s1", 1, "s3"): (4.0, 0.5, 250e-6, 20e6), ("s3", 5, "h5"): (0.0, 0.1, 40e-6, 20e6)},
        counters={("s1", 1, "s3"): (10, 20, 30_000)},
        links={("s1", "s3"): False, ("s3", "h5"): True},
        advice={("h1", "h5"): 9.5e6},
        suspects=[Suspect("link s1-s3", "down", 1.0, "carrier lost", alert=True)],
        int_reports=123, int_bad_reports=2, drops={"s3": {"queue_full": 7, "no_route": 0}},
        probes={("s1", 1, "s3"): (40, 0.03), ("s3", 1, "s1"): (12, 1.5)},
        latency={("s1", 1, "s3"): ((3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2), 700_150)})


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text) if f.name.startswith("starnet_")}


def timed(path: Path, source: str, kind: str, lateness_ms: list[float], t0: float = 1000.0) -> None:
    """One window per lateness sample, written by the processes' own writer."""
    windows = FidelityWindows(path, source, kind)
    for i, late_ms in enumerate(lateness_ms):
        now = t0 + i * WINDOW_S
        windows.tick(now)
        windows.events += 1
        windows.late(late_ms / 1e3, now)
    windows.close(t0 + len(lateness_ms) * WINDOW_S)


@pytest.fixture()
def server(tmp_path):
    fidelity = tmp_path / "fidelity.csv"
    create_file(fidelity)
    timed(fidelity, "s1", "switch", [0.5, 30.0, 0.1])
    timed(fidelity, "controller", "loop", [0.2, 0.3])
    httpd, thread = serve(state, fidelity=FidelityTail(fidelity))
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_every_documented_metric_is_served_on_the_loopback_only(server):
    assert server.server_address[0] == "127.0.0.1"
    families = scrape(server.server_port)
    assert set(families) == set(METRICS)
    queue = {(s.labels["switch"], s.labels["port"], s.labels["peer"]): s.value
             for s in families["starnet_port_queue_packets"]}
    assert queue == {("s1", "1", "s3"): 4.0, ("s3", "5", "h5"): 0.0}
    [tx_bytes] = families["starnet_port_tx_bytes"]
    assert tx_bytes.name == "starnet_port_tx_bytes_total" and tx_bytes.value == 30_000
    assert {(s.labels["a"], s.labels["b"]): s.value for s in families["starnet_link_up"]} == \
        {("s1", "s3"): 0.0, ("s3", "h5"): 1.0}
    [advice] = families["starnet_advice_rate_bits_per_second"]
    assert advice.labels == {"src": "h1", "dst": "h5"} and advice.value == 9.5e6
    [alert] = families["starnet_suspect_alert"]
    assert alert.labels == {"target": "link s1-s3", "fault": "down"} and alert.value == 1.0
    assert families["starnet_int_bad_reports"][0].value == 2
    assert {s.labels["reason"]: s.value for s in families["starnet_drops"]} == {"queue_full": 7, "no_route": 0}
    ages = {(s.labels["switch"], s.labels["peer"]): s.value for s in families["starnet_probe_age_seconds"]}
    assert ages == {("s1", "s3"): 0.03, ("s3", "s1"): 1.5}
    hist = {(s.name, s.labels.get("le")): s.value for s in families["starnet_hop_latency_seconds"]}
    assert hist[("starnet_hop_latency_seconds_bucket", "0.0001")] == 3  # 100 µs
    assert hist[("starnet_hop_latency_seconds_bucket", "0.00025")] == 4  # cumulative
    assert hist[("starnet_hop_latency_seconds_bucket", "0.25")] == 4
    assert hist[("starnet_hop_latency_seconds_bucket", "+Inf")] == 6
    assert hist[("starnet_hop_latency_seconds_count", None)] == 6
    assert hist[("starnet_hop_latency_seconds_sum", None)] == pytest.approx(0.70015)
    windows = {(s.labels["source"], s.labels["kind"]): s.value for s in families["starnet_fidelity_windows"]}
    assert windows == {("s1", "switch"): 3, ("controller", "loop"): 2}
    late = {s.labels["source"]: s.value for s in families["starnet_fidelity_late_windows"]}
    assert late == {"s1": 1, "controller": 0}  # 30 ms is beyond the 2 ms tolerance; 0.5 ms is not
    worst = {s.labels["source"]: s.value for s in families["starnet_fidelity_late_max_seconds"]}
    assert worst == pytest.approx({"s1": 0.0001, "controller": 0.0003})  # the newest window's


def test_the_fidelity_tail_reads_each_line_once_and_waits_for_a_line_being_written(tmp_path):
    path = tmp_path / "fidelity.csv"
    create_file(path)
    tail = FidelityTail(path)
    assert tail.poll() == [] and tail.windows == {}
    timed(path, "s2", "switch", [0.1, 9.0])
    assert [r.late_events for r in tail.poll()] == [0, 1]
    with path.open("a") as f:
        f.write("1000.5,s2,switch,1,0,0.100,,,0.000,0.000,\nnot,a,record\n1000.6,s2,swi")  # a half-written line
    assert [r.window for r in tail.poll()] == [10005]  # the malformed line skipped, the partial one kept
    with path.open("a") as f:
        f.write("tch,1,0,0.200,,,0.000,0.000,\n")
    [rec] = tail.poll()
    assert (rec.window, rec.source, rec.max_late_ms) == (10006, "s2", 0.2)
    assert tail.windows == {("s2", "switch"): 4} and tail.late_windows == {("s2", "switch"): 1}
    assert tail.poll() == []


def test_no_label_names_a_flow(server):
    allowed = {"switch", "port", "peer", "a", "b", "src", "dst", "target", "fault", "reason", "le", "source", "kind"}
    for name, samples in scrape(server.server_port).items():
        for sample in samples:
            assert set(sample.labels) <= allowed, (name, sample.labels)


def test_a_scrape_reads_the_event_loops_copy_from_its_own_thread():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    threads = []

    def take() -> FabricState:
        threads.append(threading.current_thread())
        return state()

    try:
        httpd, thread = serve(on_loop(loop, take))
        try:
            assert scrape(httpd.server_port)["starnet_int_reports"][0].value == 123
        finally:
            httpd.shutdown()
            httpd.server_close()
            thread.join(5)
        assert threads == [runner]  # taken on the loop's thread, not the server's
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()


def test_the_grafana_dashboard_names_only_metrics_the_controller_serves():
    dashboard = json.loads((Path(__file__).resolve().parents[3] / "dashboards/grafana-starnet.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    served = set(METRICS) | {f"{name}_total" for name in COUNTERS} | \
        {f"{name}_{suffix}" for name in HISTOGRAMS for suffix in ("bucket", "sum", "count")}
    named = {name for expr in exprs for name in re.findall(r"\bstarnet_[a-z_]+", expr)}
    assert named and named <= served, named - served
    assert len(exprs) >= 9


def test_counters_are_served_as_counters_and_the_rest_as_gauges(server):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as response:
        types = {f.name: f.type for f in text_string_to_metric_families(response.read().decode())
                 if f.name.startswith("starnet_")}
    assert {name for name, kind in types.items() if kind == "counter"} == COUNTERS
    assert {name for name, kind in types.items() if kind == "histogram"} == HISTOGRAMS
    assert {kind for name, kind in types.items() if name not in COUNTERS | HISTOGRAMS} == {"gauge"}


def test_scrapes_are_answered_from_a_rendering_refreshed_while_they_come():
    reads = []

    def read() -> FabricState:
        reads.append(time.monotonic())
        return state()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(FabricMetrics(read))
    exposition = Exposition(registry, period_s=0.2, idle_s=1.0)
    try:
        first = exposition.get()  # nothing rendered yet: this scrape renders
        assert b"starnet_int_reports_total 123.0" in first and len(reads) == 1
        assert exposition.get() is first and len(reads) == 1  # the next one, at once: the same rendering
        time.sleep(0.7)
        assert 2 <= len(reads) <= 5  # refreshed every 0.2 s while scraped
        exposition.get()
        time.sleep(1.6)
        settled = len(reads)
        time.sleep(0.6)
        assert len(reads) == settled  # no scrape for idle_s: no more rendering
    finally:
        exposition.stopping.set()
        exposition.thread.join(2)
