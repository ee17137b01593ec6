"""Prometheus metrics of the running fabric: `/metrics` in the Prometheus text format, served on
127.0.0.1 only (an ephemeral port unless `--metrics-port`; the address is written to the run
directory's `metrics.addr`) by prometheus_client's threading WSGI server, in the controller's web
front (controller/front.py: a process of its own, so that no scrape waits for the controller's
interpreter lock).

While scrapes come, a thread of the front asks the controller every second for a copy of what its
parts hold (`FabricState`, taken on the controller's event loop: the INT collector's port state, the
localiser's last counter read and its suspects, the healer's link states, the advice last sent) and
renders that copy with prometheus_client; a scrape gets the last rendering at once (`Exposition`):
nothing on the packet path, nothing read while the loop writes it, and a scrape's time independent
of the loop's load. The fidelity windows every process appends to the run's fidelity.csv are
followed in the rendering thread (wire.fidelity.FidelityTail: only new lines).

Names are prefixed `starnet_` and in base units (bytes, seconds, bits per second, ratios); labels
come from the topology — switch, port, peer, link ends, hosts, a suspect's target and fault, a timed
process — never
from flows, so the number of series is fixed by the fabric, not by its traffic.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, ThreadingWSGIServer, _SilentHandler, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from controller.localizer import Suspect
from wire.fidelity import FidelityTail

PortKey = tuple[str, int, str]  # switch, port, the node at its other end
# Upper bounds (µs) of the hop-latency histogram's buckets (the collector counts INT's reports into them,
# controller/telemetry.py): a frame's own time on a 20 Mbit/s wire is 0.6 ms, a full 64-frame queue
# there 39 ms, a stalled switch's tens of ms more.
LATENCY_BUCKETS_US = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000)
SCRAPE_TIMEOUT_S = 2.0  # a rendering waits this long for the event loop's copy
RENDER_PERIOD_S = 1.0  # while scraped, the text is rendered this often ...
IDLE_S = 30.0  # ... until no scrape came for this long
log = logging.getLogger("controller.metrics")
# Every metric the controller serves: name (without the _total a counter's sample adds) → help.
METRICS = {
    "starnet_port_queue_packets": "Queue depth of a switch port in packets, as INT last reported it",
    "starnet_port_utilisation_ratio": "Share of a switch port's capacity it sent at between INT reports (0-1)",
    "starnet_port_hop_latency_seconds": "Hop latency INT last reported at a switch port",
    "starnet_hop_latency_seconds": "Hop latencies INT reported at a switch port (histogram)",
    "starnet_port_capacity_bits_per_second": "Capacity of the link a switch port sends on",
    "starnet_port_rx_packets": "Frames a fabric port received (P4Runtime counter StarIngress.port_rx)",
    "starnet_port_tx_packets": "Frames a fabric port sent (P4Runtime counter StarEgress.port_tx)",
    "starnet_port_tx_bytes": "Bytes a fabric port sent (P4Runtime counter StarEgress.port_tx)",
    "starnet_link_up": "1 while a link carries traffic, 0 while its carrier or its probes say it is down",
    "starnet_advice_rate_bits_per_second": "Rate the controller advised a source host for a destination host",
    "starnet_suspect_score": "The localiser's score of a suspect (0-1)",
    "starnet_suspect_alert": "1 when the localiser raises an alert for the suspect",
    "starnet_drops": "Frames a switch dropped, by reason (P4Runtime counter StarIngress.drop_reason)",
    "starnet_probe_received": "Link probes a fabric port's peer received from it (self-healing)",
    "starnet_probe_age_seconds": "Time since the newest probe a fabric port sent reached its peer "
                                 "(above probe period x misses: the link direction is down)",
    "starnet_int_reports": "INT reports the collector decoded",
    "starnet_int_bad_reports": "INT reports the collector could not decode (counted and dropped)",
    "starnet_fidelity_windows": "100 ms windows a process timed itself in (fidelity.csv; kind switch or loop)",
    "starnet_fidelity_late_windows": "Windows in which a process was late beyond its tolerance (unfaithful timing)",
    "starnet_fidelity_late_max_seconds": "Worst lateness in the newest window a process reported",
}


COUNTERS = {"starnet_port_rx_packets", "starnet_port_tx_packets", "starnet_port_tx_bytes", "starnet_drops",
            "starnet_probe_received", "starnet_int_reports", "starnet_int_bad_reports",
            "starnet_fidelity_windows", "starnet_fidelity_late_windows"}  # served with _total
HISTOGRAMS = {"starnet_hop_latency_seconds"}  # served as _bucket, _sum, _count; the rest are gauges


@dataclass(frozen=True)
class FabricState:
    """A copy of what the controller's parts hold, taken on its event loop.
    ports: (switch, port, peer) → (queue packets, utilisation 0-1, hop latency s, capacity bit/s);
    counters: (switch, port, peer) → (rx packets, tx packets, tx bytes), fabric ports;
    links: (end a, end b) → up; advice: (source host, destination host) → bit/s; drops: switch →
    reason → frames; probes: (switch, port, peer) → (probes received from it, seconds since the newest);
    latency: (switch, port, peer) → (hop latencies per LATENCY_BUCKETS_US bucket and above, their sum µs);
    seen: (switch, port, peer) → wall time INT last reported the port (for the live page)."""

    ports: dict[PortKey, tuple[float, float, float, float]] = field(default_factory=dict)
    counters: dict[PortKey, tuple[int, int, int]] = field(default_factory=dict)
    links: dict[tuple[str, str], bool] = field(default_factory=dict)
    advice: dict[tuple[str, str], float] = field(default_factory=dict)
    suspects: list[Suspect] = field(default_factory=list)
    drops: dict[str, dict[str, int]] = field(default_factory=dict)
    probes: dict[PortKey, tuple[int, float]] = field(default_factory=dict)
    latency: dict[PortKey, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    seen: dict[PortKey, float] = field(default_factory=dict)
    int_reports: int = 0
    int_bad_reports: int = 0


class FabricMetrics(Collector):
    """The metric families of one FabricState, read when scraped, and of the fidelity windows the
    run's processes appended to fidelity.csv since the last scrape (`fidelity`, read in the scraping
    thread: the file is not the event loop's)."""

    def __init__(self, read: Callable[[], FabricState], fidelity: FidelityTail | None = None) -> None:
        self.read = read
        self.fidelity = fidelity

    def collect(self) -> Iterator[Metric]:
        state = self.read()
        port_labels = ["switch", "port", "peer"]

        def by_port(name: str, family: type[GaugeMetricFamily] | type[CounterMetricFamily],
                    values: dict[PortKey, float]) -> Metric:
            metric = family(name, METRICS[name], labels=port_labels)
            for (switch, port, peer), value in sorted(values.items()):
                metric.add_metric([switch, str(port), peer], value)
            return metric

        for i, name in enumerate(("starnet_port_queue_packets", "starnet_port_utilisation_ratio",
                                  "starnet_port_hop_latency_seconds", "starnet_port_capacity_bits_per_second")):
            yield by_port(name, GaugeMetricFamily, {k: v[i] for k, v in state.ports.items()})
        for i, name in enumerate(("starnet_port_rx_packets", "starnet_port_tx_packets", "starnet_port_tx_bytes")):
            yield by_port(name, CounterMetricFamily, {k: v[i] for k, v in state.counters.items()})
        histogram = HistogramMetricFamily("starnet_hop_latency_seconds", METRICS["starnet_hop_latency_seconds"],
                                          labels=port_labels)
        bounds = [f"{b / 1e6:g}" for b in LATENCY_BUCKETS_US] + ["+Inf"]
        for (switch, port, peer), (counts, sum_us) in sorted(state.latency.items()):
            cumulative = list(itertools.accumulate(counts))
            histogram.add_metric([switch, str(port), peer], list(zip(bounds, cumulative, strict=True)), sum_us / 1e6)
        yield histogram
        yield by_port("starnet_probe_received", CounterMetricFamily, {k: v[0] for k, v in state.probes.items()})
        yield by_port("starnet_probe_age_seconds", GaugeMetricFamily, {k: v[1] for k, v in state.probes.items()})
        drops = CounterMetricFamily("starnet_drops", METRICS["starnet_drops"], labels=["switch", "reason"])
        for switch, reasons in sorted(state.drops.items()):
            for reason, frames in reasons.items():
                drops.add_metric([switch, reason], frames)
        yield drops
        links = GaugeMetricFamily("starnet_link_up", METRICS["starnet_link_up"], labels=["a", "b"])
        for (a, b), up in sorted(state.links.items()):
            links.add_metric([a, b], 1.0 if up else 0.0)
        yield links
        advice = GaugeMetricFamily("starnet_advice_rate_bits_per_second",
                                   METRICS["starnet_advice_rate_bits_per_second"], labels=["src", "dst"])
        for (src, dst), rate in sorted(state.advice.items()):
            advice.add_metric([src, dst], rate)
        yield advice
        score = GaugeMetricFamily("starnet_suspect_score", METRICS["starnet_suspect_score"],
                                  labels=["target", "fault"])
        alert = GaugeMetricFamily("starnet_suspect_alert", METRICS["starnet_suspect_alert"],
                                  labels=["target", "fault"])
        for s in state.suspects:
            score.add_metric([s.target, s.fault], s.score)
            alert.add_metric([s.target, s.fault], 1.0 if s.alert else 0.0)
        yield score
        yield alert
        yield CounterMetricFamily("starnet_int_reports", METRICS["starnet_int_reports"], value=state.int_reports)
        yield CounterMetricFamily("starnet_int_bad_reports", METRICS["starnet_int_bad_reports"],
                                  value=state.int_bad_reports)
        if self.fidelity is not None:
            yield from self._fidelity(self.fidelity)

    @staticmethod
    def _fidelity(tail: FidelityTail) -> Iterator[Metric]:
        tail.poll()
        labels = ["source", "kind"]
        windows = CounterMetricFamily("starnet_fidelity_windows", METRICS["starnet_fidelity_windows"], labels=labels)
        late = CounterMetricFamily("starnet_fidelity_late_windows", METRICS["starnet_fidelity_late_windows"],
                                   labels=labels)
        worst = GaugeMetricFamily("starnet_fidelity_late_max_seconds", METRICS["starnet_fidelity_late_max_seconds"],
                                  labels=labels)
        with tail.lock:
            for key in sorted(tail.windows):
                windows.add_metric(list(key), tail.windows[key])
                late.add_metric(list(key), tail.late_windows[key])
                worst.add_metric(list(key), tail.newest[key].max_late_ms / 1e3)
        yield windows
        yield late
        yield worst


def on_loop(loop: asyncio.AbstractEventLoop, take: Callable[[], FabricState]) -> Callable[[], FabricState]:
    """A reader for another thread (the front's, controller/front.py): `take` runs on the event loop,
    the caller waits for its copy."""
    async def taken() -> FabricState:
        return take()

    return lambda: asyncio.run_coroutine_threadsafe(taken(), loop).result(SCRAPE_TIMEOUT_S)


class Exposition:
    """The registry's text, rendered in a thread of its own every RENDER_PERIOD_S while scrapes come
    (none for IDLE_S: it stops), so a scrape is answered from the last rendering at once. Rendering a
    k=4 fat-tree's ~1,500 series takes prometheus_client ~27 ms of a quiet core and over 100 ms
    beside a busy controller loop; the values a scrape gets are at most RENDER_PERIOD_S old (the
    switches' counters are read once a second anyway). The first scrape after a pause renders itself."""

    def __init__(self, registry: CollectorRegistry, period_s: float = RENDER_PERIOD_S, idle_s: float = IDLE_S) -> None:
        self.registry = registry
        self.period_s, self.idle_s = period_s, idle_s
        self.body = b""
        self.rendered = -math.inf
        self.asked = -math.inf
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._render_while_asked, name="metrics-render", daemon=True)
        self.thread.start()

    def _render(self) -> bytes:
        with self.lock:
            started = time.monotonic()
            body = generate_latest(self.registry)
            self.body, self.rendered = body, started
            return body

    def get(self) -> bytes:
        now = time.monotonic()
        self.asked = now
        if now - self.rendered > 2 * self.period_s:  # the renderer was idle (or behind): this scrape renders
            return self._render()
        return self.body

    def _render_while_asked(self) -> None:
        while not self.stopping.wait(self.period_s):
            if time.monotonic() - self.asked < self.idle_s:
                try:
                    self._render()
                except Exception as exc:  # a state copy that timed out on a busy loop: the next may not
                    log.warning("metrics: not rendered (%s: %s)", type(exc).__name__, exc)

    def app(self, environ: dict, start_response: Callable) -> list[bytes]:
        """The WSGI application: /metrics, nothing else."""
        if environ.get("PATH_INFO", "/") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics here\n"]
        body = self.get()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))])
        return [body]


class MetricsServer(ThreadingWSGIServer):
    """/metrics on 127.0.0.1 (prometheus_client's threading WSGI server and quiet handler)."""

    def __init__(self, exposition: Exposition, port: int) -> None:
        self.exposition = exposition  # before the bind: a port taken closes the server inside __init__
        super().__init__(("127.0.0.1", port), _SilentHandler)
        self.set_app(exposition.app)

    def server_close(self) -> None:
        self.exposition.stopping.set()
        super().server_close()


def serve(read: Callable[[], FabricState], port: int = 0,
          fidelity: FidelityTail | None = None) -> tuple[MetricsServer, threading.Thread]:
    """/metrics on 127.0.0.1:port (0: a free port; the server's `server_port` says which)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FabricMetrics(read, fidelity))
    server = MetricsServer(Exposition(registry), port)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread
