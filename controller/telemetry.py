"""The INT collector: reports (PacketIns with reason INT_REPORT) → per-(switch, egress port) state.

Each hop of a report says, for one switch egress port: queue occupancy (packets), hop latency
(µs), and the port's cumulative tx bytes (mod 2^32) at a switch-local egress timestamp (µs).
The tx rate is the wrap-safe byte delta over the timestamp delta of two reports for the same
port; utilisation is that rate over the port's capacity. State older than `max_age_s` is dropped.
Every update is appended to a CSV time series in the run directory.

Readers (the advice loop, the gRPC API) see the collector through snapshot(): an immutable view
of every port and flow at one version, and on_change() listeners called after every accepted
report, so they react to changes instead of polling and never touch the collector's own state.

HopLateness is the timing monitor of switches that have none of their own (BMv2): from the hops
they stamp, what they held a packet beyond its queue, into fidelity.csv (wire/fidelity.py).
"""

from __future__ import annotations

import bisect
import csv
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from controller.metrics import LATENCY_BUCKETS_US
from topologies.spec import LinkId, egress_link
from wire import runfiles
from wire.fidelity import BMV2_RATE_PKT_BYTES, FidelityWindows
from wire.intmd import UNKNOWN32, Hop, IntFormatError, IntStack, int_length, l4_header_length, parse

# The rate is taken over at least this much switch time: at 20 Mbit/s, 20 ms is ~33 full-size
# frames, so one frame more or less between two reports moves the rate by ~3%, not by 60% as over 1 ms.
MIN_RATE_INTERVAL_US = 20_000
# The standing queue is the smallest reading over this window of switch time: a burst that
# passes is not a queue to drain (CoDel's sojourn-minimum idea). On a slow link the window is at
# least STANDING_FRAMES frame times (at 1 Mbit/s one frame is 12 ms: 20 ms would hold one reading).
STANDING_WINDOW_US = 20_000
STANDING_FRAMES = 8
RATE_WINDOW_S = 0.2  # a flow's sampled data rate is counted over windows at least this long
BULK_PAYLOAD = 1000  # bytes: a TCP segment this full (MSS 1448 here) is a transfer's, not a message's
BACKLOG_PKTS = 3  # drain rates: both samples found at least this queue ...
BACKLOG_INTERVAL_US = 20_000  # ... and left at most this far apart
SERIES_FIELDS = runfiles.TELEMETRY_FIELDS


@dataclass
class PortState:
    switch: str
    port: int
    queue_pkts: int = 0
    hop_latency_us: int = 0
    capacity_mbps: int = 0
    tx_rate_mbps: float | None = None
    updated: float = 0.0
    _tx_bytes: int | None = field(default=None, repr=False)
    _ts_us: int | None = field(default=None, repr=False)
    _recent: deque = field(default_factory=deque, repr=False)  # (egress ts µs, queue pkts)
    _last: tuple[int, int, int] | None = field(default=None, repr=False)  # egress ts µs, tx bytes, queue
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_US) + 1), repr=False)
    latency_sum_us: int = field(default=0, repr=False)  # with latency_counts: INT's hop latencies, a histogram

    @property
    def standing_queue_pkts(self) -> int:
        return min((q for _, q in self._recent), default=self.queue_pkts)

    @property
    def utilisation(self) -> float | None:
        if self.tx_rate_mbps is None or not self.capacity_mbps or self.capacity_mbps == UNKNOWN32:
            return None
        return self.tx_rate_mbps / self.capacity_mbps


@dataclass(frozen=True)
class PortView:
    """One switch egress port as the collector last saw it (times: the collector's monotonic clock)."""

    switch: str
    port: int
    queue_pkts: int
    standing_queue_pkts: int
    hop_latency_us: int
    capacity_mbps: int
    tx_rate_mbps: float | None
    utilisation: float | None
    updated: float


@dataclass(frozen=True)
class FlowPath:
    """The last path a flow's INT showed: (switch, ingress port, egress port) from source to sink;
    data_at: when a reported packet of it last carried payload (None: only pure ACKs so far — the
    reverse direction of a TCP transfer is a flow to INT, but no demand); data_reports: how many of
    its reports carried payload (a flow that keeps sending is reported again every 10 ms or so; a
    short exchange, such as a control connection's, once or twice); sampled_bps: the payload of its
    reported packets per second over its last RATE_WINDOW_S or more (None until one has passed) —
    times the sampling factor 2^N a lower bound of its data rate (a sink reports a flow at most once
    per 10 ms), exact where its packets are fewer: a collective's idle connection carrying its
    peers' small notifications shows tens of kbit/s, a transfer at its NIC's rate megabits;
    window_at, window_bytes: the window being counted; bulk: a reported packet of it carried a
    segment of BULK_PAYLOAD bytes or more — what a sender with more to send than one small message
    writes (a barrier's or a notification's few bytes never fill one)."""

    hops: tuple[tuple[str, int, int], ...]
    updated: float
    data_at: float | None = None
    data_reports: int = 0
    sampled_bps: float | None = None
    window_at: float = 0.0
    window_bytes: int = 0
    bulk: bool = False


FlowKey = tuple[str, str, int, int, int]  # src ip, dst ip, IP protocol, src port, dst port


@dataclass(frozen=True)
class TelemetrySnapshot:
    """The collector at one version: read-only mappings, safe to keep while reports arrive."""

    version: int
    reports: int
    bad_reports: int
    ports: Mapping[LinkId, PortView]
    flows: Mapping[FlowKey, FlowPath]


class HopLateness:
    """Per switch, the lateness of each INT hop it stamped: hop latency minus the longest its
    schedule allows (the q packets it found at enqueue and one more, BMV2_RATE_PKT_BYTES frames at
    the port's capacity), per 100 ms window into fidelity.csv.
    windows: switch name → its FidelityWindows (kind "switch")."""

    def __init__(self, windows: dict[str, FidelityWindows], pkt_bytes: int = BMV2_RATE_PKT_BYTES) -> None:
        self.windows = windows
        self.pkt_bits = pkt_bytes * 8

    def hop(self, switch: str, hop: Hop, now: float) -> None:
        """One hop of `switch`, seen at wall-clock `now`."""
        windows = self.windows.get(switch)
        if (windows is None or hop.hop_latency_us == UNKNOWN32 or hop.queue_occupancy_pkts == 0xFFFFFF
                or not hop.capacity_mbps or hop.capacity_mbps == UNKNOWN32):
            return
        # With q packets ahead, departures T apart, a frame leaves at most (q + 1)·T after it came.
        drain_us = (hop.queue_occupancy_pkts + 1) * self.pkt_bits / hop.capacity_mbps
        windows.tick(now)
        windows.events += 1
        windows.egress_late(max(0.0, (hop.hop_latency_us - drain_us) / 1e6), now)

    def tick(self, now: float) -> None:
        """Close every window `now` is past (called periodically: a window with no later hop
        would otherwise stay open)."""
        for windows in self.windows.values():
            windows.tick(now)

    def close(self) -> None:
        for windows in self.windows.values():
            windows.close()


FLOW_LOG_FIELDS = ["time", "src", "dst", "proto", "sport", "dport", "path", "source_egress_us", "sink_egress_us"]


class Collector:
    """node_names: INT node id → switch name; series: CSV path for the time series (None = off);
    lateness: the timing monitor fed with the hops of switches that have none of their own;
    flow_log: CSV path for one row per flow when its first report with payload arrives (wall time,
    5-tuple, path, the source and sink hops' egress timestamps on their switch-local µs clocks), so
    a benchmark can time the advice path stage by stage (None = off)."""

    def __init__(self, node_names: dict[int, str], series: Path | None = None, max_age_s: float = 5.0,
                 lateness: HopLateness | None = None, flow_log: Path | None = None) -> None:
        self.node_names = node_names
        self.lateness = lateness
        self.max_age_s = max_age_s
        self._ports: dict[LinkId, PortState] = {}
        self._latency_low: dict[tuple[str, int], tuple[int, int]] = {}  # lowest hop latency µs, its queue
        self._drain_rates: dict[tuple[str, int], list[float]] = {}  # Mbit/s between backlogged samples
        self._flows: dict[FlowKey, FlowPath] = {}
        self.reports = 0
        self.bad_reports = 0
        self.version = 0  # changes with every accepted report (and every expiry that removed state)
        self._snapshot: TelemetrySnapshot | None = None
        self._listeners: list[Callable[[], None]] = []
        self._series = None
        self._writer = None
        if series is not None:
            new = not series.exists()
            self._series = series.open("a", newline="")
            self._writer = csv.writer(self._series)
            if new:
                self._writer.writerow(SERIES_FIELDS)
        self._flow_file = flow_log.open("a", newline="") if flow_log is not None else None
        if self._flow_file is not None and self._flow_file.tell() == 0:
            csv.writer(self._flow_file).writerow(FLOW_LOG_FIELDS)

    def feed(self, frame: bytes, now: float | None = None) -> IntStack | None:
        """Take one report (an Ethernet frame with INT); return its stack, None if it was not valid INT."""
        now = time.monotonic() if now is None else now
        try:
            stack, flow = decode_report(frame)
        except (IntFormatError, IndexError, ValueError):
            self.bad_reports += 1
            return None
        self.reports += 1
        path = []
        wall = time.time()
        for hop in stack.hops:
            switch = self.node_names.get(hop.node_id, f"node{hop.node_id}")
            path.append((switch, hop.ingress_port, hop.egress_port))
            self._update_port(switch, hop, now)
            if self.lateness is not None:
                self.lateness.hop(switch, hop, wall)
        previous = self._flows.get(flow)
        payload = payload_bytes(frame)
        data_at = now if payload else (previous.data_at if previous else None)
        sampled_bps, window_at, window_bytes = None, now, payload
        if previous is not None:
            sampled_bps, window_at, window_bytes = previous.sampled_bps, previous.window_at, previous.window_bytes
            if now - window_at >= RATE_WINDOW_S:  # the window closes: its rate, and a new one from here
                sampled_bps, window_at, window_bytes = window_bytes * 8 / (now - window_at), now, payload
            else:
                window_bytes += payload
        self._flows[flow] = FlowPath(tuple(reversed(path)), now, data_at,
                                     (previous.data_reports if previous else 0) + (payload > 0), sampled_bps,
                                     window_at, window_bytes,
                                     payload >= BULK_PAYLOAD or (previous is not None and previous.bulk))
        if self._flow_file is not None and data_at is not None and (previous is None or previous.data_at is None):
            csv.writer(self._flow_file).writerow([f"{wall:.6f}", *flow, " ".join(p[0] for p in reversed(path)),
                                                  stack.hops[-1].egress_ts_us, stack.hops[0].egress_ts_us])
            self._flow_file.flush()
        self._changed()
        return stack

    # ---- the read API ---------------------------------------------------------------------------
    def latency_histograms(self) -> dict[tuple[str, int], tuple[tuple[int, ...], int]]:
        """(switch, egress port) → (hop latencies INT reported there per LATENCY_BUCKETS_US bucket, the
        last one above them all; their sum in µs), since the collector started."""
        return {(s.switch, s.port): (tuple(s.latency_counts), s.latency_sum_us) for s in self._ports.values()}

    def snapshot(self) -> TelemetrySnapshot:
        """Every port and flow at the current version (built once per version)."""
        if self._snapshot is None or self._snapshot.version != self.version:
            ports = {key: PortView(s.switch, s.port, s.queue_pkts, s.standing_queue_pkts, s.hop_latency_us,
                                   s.capacity_mbps, s.tx_rate_mbps, s.utilisation, s.updated)
                     for key, s in self._ports.items()}
            self._snapshot = TelemetrySnapshot(self.version, self.reports, self.bad_reports,
                                               MappingProxyType(ports), MappingProxyType(dict(self._flows)))
        return self._snapshot

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` (no arguments, on the feeding thread) after every change of version."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.version += 1
        for listener in self._listeners:
            listener()

    def _update_port(self, switch: str, hop: Hop, now: float) -> None:
        key = egress_link(switch, hop.egress_port)
        state = self._ports.get(key)
        if state is None:
            state = self._ports[key] = PortState(switch, hop.egress_port)
        if hop.queue_occupancy_pkts != 0xFFFFFF:
            state.queue_pkts = hop.queue_occupancy_pkts
            recent = state._recent
            recent.append((hop.egress_ts_us, hop.queue_occupancy_pkts))
            window_us: float = STANDING_WINDOW_US
            if hop.capacity_mbps and hop.capacity_mbps != UNKNOWN32:
                window_us = max(window_us, STANDING_FRAMES * BMV2_RATE_PKT_BYTES * 8 / hop.capacity_mbps)
            while recent and recent[0][0] < hop.egress_ts_us - window_us:
                recent.popleft()
        if hop.hop_latency_us != UNKNOWN32:
            state.hop_latency_us = hop.hop_latency_us
            state.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_US, hop.hop_latency_us)] += 1
            state.latency_sum_us += hop.hop_latency_us
            low = self._latency_low.get((switch, hop.egress_port))
            if low is None or hop.hop_latency_us < low[0]:
                self._latency_low[(switch, hop.egress_port)] = (hop.hop_latency_us, hop.queue_occupancy_pkts)
        state.capacity_mbps = hop.capacity_mbps
        prev = state._last
        if prev is not None and hop.queue_occupancy_pkts != 0xFFFFFF and min(prev[2], hop.queue_occupancy_pkts) >= \
                BACKLOG_PKTS and 0 < hop.egress_ts_us - prev[0] <= BACKLOG_INTERVAL_US:
            # both frames found a queue and left close together: the port drained without a pause
            drained = (hop.tx_bytes - prev[1]) % (1 << 32) * 8 / (hop.egress_ts_us - prev[0])
            self._drain_rates.setdefault((switch, hop.egress_port), []).append(drained)
        state._last = (hop.egress_ts_us, hop.tx_bytes, hop.queue_occupancy_pkts)
        if state._ts_us is not None and state._tx_bytes is not None and hop.egress_ts_us > state._ts_us:
            interval = hop.egress_ts_us - state._ts_us
            if interval >= MIN_RATE_INTERVAL_US:
                sent = (hop.tx_bytes - state._tx_bytes) % (1 << 32)  # wrap-safe
                state.tx_rate_mbps = sent * 8 / interval  # bytes per µs × 8 = Mbit/s
                state._tx_bytes, state._ts_us = hop.tx_bytes, hop.egress_ts_us
        else:
            state._tx_bytes, state._ts_us = hop.tx_bytes, hop.egress_ts_us
        state.updated = now
        if self._writer is not None:
            self._writer.writerow([f"{time.time():.6f}", switch, hop.egress_port, state.queue_pkts,
                                   state.hop_latency_us,
                                   "" if state.tx_rate_mbps is None else f"{state.tx_rate_mbps:.3f}",
                                   "" if state.utilisation is None else f"{state.utilisation:.4f}"])

    def take_latency_lows(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Per (switch, egress port), the lowest hop latency (µs) INT reported since the last call,
        with the queue (packets) that hop saw: a switch that holds every frame shows it even in its
        fastest one (controller/localizer.py)."""
        lows, self._latency_low = self._latency_low, {}
        return lows

    def take_drain_rates(self) -> dict[tuple[str, int], list[float]]:
        """Per (switch, egress port), the rates (Mbit/s) it drained at between consecutive INT samples
        that both found a queue of at least BACKLOG_PKTS and left within BACKLOG_INTERVAL_US, since
        the last call: a healthy backlogged port drains at its capacity (controller/localizer.py)."""
        rates, self._drain_rates = self._drain_rates, {}
        return rates

    def expire(self, now: float | None = None) -> int:
        """Drop state not refreshed within max_age_s; return how many entries went."""
        now = time.monotonic() if now is None else now
        stale = [k for k, s in self._ports.items() if now - s.updated > self.max_age_s]
        for key in stale:
            del self._ports[key]
        old_flows = [k for k, f in self._flows.items() if now - f.updated > self.max_age_s]
        for flow in old_flows:
            del self._flows[flow]
        if stale or old_flows:
            self._changed()
        return len(stale) + len(old_flows)

    def flush(self) -> None:
        if self._series is not None:
            self._series.flush()

    def close(self) -> None:
        if self._series is not None:
            self._series.close()
            self._series = self._writer = None
        if self._flow_file is not None:
            self._flow_file.close()
            self._flow_file = None
        if self.lateness is not None:
            self.lateness.close()


def payload_bytes(frame: bytes) -> int:
    """L4 payload of the packet a (decodable) report carries: IPv4 total length less the IPv4, L4
    and INT headers (0 for a pure TCP ACK)."""
    l4 = 34 + l4_header_length(frame, 34, frame[23])
    return max(0, int.from_bytes(frame[16:18], "big") - 20 - (l4 - 34) - int_length(frame, l4))


def decode_report(frame: bytes) -> tuple[IntStack, tuple[str, str, int, int, int]]:
    """The INT stack and 5-tuple of a report frame (Ethernet / IPv4 / TCP|UDP / INT ...)."""
    if len(frame) < 38:
        raise IntFormatError(f"report of {len(frame)} bytes is shorter than Ethernet + IPv4 + ports")
    # Any DSCP: the switch marked it with the one the controller configured (--int-dscp); the INT
    # block's own checks (parse) say whether it is INT.
    if frame[12:14] != b"\x08\x00" or frame[14] != 0x45:
        raise IntFormatError("report is not an IPv4 frame carrying INT")
    proto = frame[23]
    if proto not in (6, 17):
        raise IntFormatError(f"report carries IP protocol {proto}, not TCP or UDP")
    src = ".".join(str(b) for b in frame[26:30])
    dst = ".".join(str(b) for b in frame[30:34])
    sport, dport = int.from_bytes(frame[34:36], "big"), int.from_bytes(frame[36:38], "big")
    return parse(frame, 34 + l4_header_length(frame, 34, proto)), (src, dst, proto, sport, dport)
