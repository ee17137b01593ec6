"""INT in the soft switch: source insertion at ingress, hop push / sink strip and reports at egress.

Mirrors p4src/include/int.p4 with the layout of wire/intmd.py. A frame that carries (or starts)
INT leaves ingress as an IntPending: the hop is written when the frame leaves its egress queue,
so hop latency (ingress to departure, µs), queue occupancy at enqueue (packets) and the egress
timestamp are what the switch really saw. At a sink port (int_sink) the switch adds its own hop,
sends the stack to the CPU port as an INT_REPORT packet-in (at once if any hop flagged congestion,
unless the flow slot reported in the last REPORT_CONGESTED_INTERVAL_S; else at most once per
REPORT_INTERVAL_S per flow slot), then strips INT and restores the DSCP and lengths, so the
destination receives the bytes that were sent.

The congested reports' gap: a ring of TCP flows at 40 Mbit/s keeps every bottleneck queue over its
ECN threshold, so nearly every sampled packet was reported (~700 reports/s per leaf, 3 in 4 of its
INT packets), and the reports were the controller's largest cost. One per 2.5 ms per flow still
tells the advisor at once when a flow meets a queue, and again well within its 10 ms.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from wire.cpu import REASON_INT_REPORT, REPORT_CONGESTED_INTERVAL_US, REPORT_FLOW_SLOTS, REPORT_INTERVAL_US
from wire.intmd import (
    DS_FLAG_CONGESTED,
    DSCP_INT,
    HOP_BYTES,
    HOP_STRUCT,
    MD_DS_FLAGS,
    SHIM_BYTES,
    SHIM_LEN,
    UNKNOWN32,
    insert_source_header,
    push_hop,
    strip,
)

_HOP = HOP_STRUCT

REPORT_INTERVAL_S = REPORT_INTERVAL_US / 1e6
REPORT_CONGESTED_INTERVAL_S = REPORT_CONGESTED_INTERVAL_US / 1e6


class IntPending:
    """A frame carrying INT on its way through the egress queue. fresh: this switch is the flow's
    source and sink at once, and the frame carries no INT yet — it leaves as it came, and only a
    report that is due gets the INT header and this switch's hop."""

    __slots__ = ("frame", "in_port", "int_off", "sink", "t_in", "qdepth", "flow_slot", "fresh")

    def __init__(self, frame: bytearray, in_port: int, int_off: int, sink: bool, t_in: float,
                 flow_slot: int, fresh: bool = False) -> None:
        self.frame = frame
        self.in_port = in_port
        self.int_off = int_off
        self.sink = sink
        self.t_in = t_in
        self.qdepth = 0
        self.flow_slot = flow_slot
        self.fresh = fresh

    def __len__(self) -> int:
        # Bytes on the wire as the token bucket should see them.
        if self.fresh:
            return len(self.frame)
        if self.sink:
            return len(self.frame) - SHIM_BYTES - 4 * self.frame[self.int_off + SHIM_LEN]
        return len(self.frame) + HOP_BYTES


def flow_ids(addrs_ports: bytes, proto: int) -> tuple[int, int]:
    """A flow's slot (report rate limit, int_flow_seen) and its signature in that slot (1..65536),
    as starnet.p4 hashes them; computed once per flow (the flow cache keeps them)."""
    five_tuple = addrs_ports + bytes((proto,))
    return zlib.crc32(five_tuple) % REPORT_FLOW_SLOTS, 1 + zlib.crc32(five_tuple, 1) % 65536


@dataclass(frozen=True)
class EgressConfig:
    """What the egress side takes from the committed state: this switch's INT node id, per port its
    capacity and ECN threshold (port_config), and the bytes a report carries (starnet.p4's
    truncate(), or clone session 500's packet_length_bytes if shorter; None = no session, no
    reports). One object per committed state, shared by the pipeline snapshot, the INT engine and
    (at each swap) the egress queues' thresholds."""

    node_id: int = 0
    int_dscp: int = DSCP_INT  # what a source marks (int_node's set_node_id)
    capacity_mbps: Mapping[int, int] = field(default_factory=dict)
    ecn_thresholds: Mapping[int, int] = field(default_factory=dict)
    report_bytes: int | None = None


class IntEngine:
    """Per-switch INT state: the egress config in force, report rate limit, clock."""

    def __init__(self) -> None:
        self.config = EgressConfig()
        self.last_report = [0.0] * REPORT_FLOW_SLOTS
        self.to_cpu: Callable[[bytes, int, int], None] | None = None
        self.epoch = time.monotonic()
        self.epoch_wall = time.time() - (time.monotonic() - self.epoch)  # wall time of clock_us 0
        self.reports = 0
        self.rate_limited = 0
        self.reports_lost = 0  # reports no controller took (none connected, its stream full)

    def clock_us(self, t: float) -> int:
        """The switch-local clock in µs, starting at 0 like BMv2's."""
        return int((t - self.epoch) * 1e6)

    def egress(self, item: IntPending, port: int, tx_bytes: int, now: float | None = None) -> bytearray:
        """The frame as it leaves `port` at monotonic time `now` (default: the clock): with this
        switch's hop (transit), or stripped (sink). A sink builds its hop and the report only when
        a report is due (a hop flagged congestion and the flow slot's congested interval has passed,
        or its routine interval has): the frame that leaves is the same either way, so the rest
        skip that work."""
        if now is None:
            now = time.monotonic()
        config = self.config
        threshold = config.ecn_thresholds.get(port, 0)
        congested = bool(threshold) and item.qdepth >= threshold
        since = now - self.last_report[item.flow_slot]
        if item.sink and since < REPORT_INTERVAL_S and (since < REPORT_CONGESTED_INTERVAL_S or not congested and (
                item.fresh or not item.frame[item.int_off + MD_DS_FLAGS] & DS_FLAG_CONGESTED >> 8)):
            self.rate_limited += 1
            return item.frame if item.fresh else strip(item.frame, item.int_off)
        frame = insert_source_header(item.frame, item.int_off, config.int_dscp) if item.fresh else item.frame
        hop = _HOP.pack(config.node_id, item.in_port, port, min(UNKNOWN32, max(0, int((now - item.t_in) * 1e6))),
                        min(item.qdepth, 0xFFFFFF), max(0, int((now - self.epoch) * 1e6)), tx_bytes,
                        config.capacity_mbps.get(port, UNKNOWN32))
        with_hop = push_hop(frame, item.int_off, hop, congested)
        if not item.sink:
            return with_hop
        self._report(with_hop, item, now)
        return item.frame if item.fresh else strip(with_hop, item.int_off)

    def _report(self, frame: bytearray, item: IntPending, now: float) -> None:
        report_bytes = self.config.report_bytes
        if report_bytes is None or self.to_cpu is None:
            return
        self.last_report[item.flow_slot] = now
        self.reports += 1
        report = bytes(frame[:report_bytes])
        self.to_cpu(report, item.in_port, REASON_INT_REPORT)
