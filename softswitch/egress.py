"""Per-port egress queue: a link of the configured rate in virtual time, tail drop at a depth in packets.

This is where a link-rate limit lives (inside the switch, visible to telemetry), as BMv2's
egress queue rate/depth would be; the Linux side of the veth has no qdisc doing it.

The queue runs on the frames' kernel arrival times, not on when this process got to them: a
frame that arrives at t starts when the link is free (max(t, the previous frame's finish)) and
leaves at start + size / rate; the queue depth a frame sees (for tail drop, ECN and INT) is the
number of earlier frames not yet finished at t. So a moment when the switch process was not
scheduled delays frames a little but does not show up as a queue that the traffic did not build;
frames whose departure time has passed are sent at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from softswitch.inband import IntPending
from softswitch.pipeline import mark_ce

MAX_FRAME = 9018
LATE_SLACK_PKTS = 256  # frames held beyond the depth while the process catches up, then dropped


class EgressQueue:
    __slots__ = (
        "port", "send", "rate_Bps", "depth_pkts", "queue", "finishes", "free_at",
        "drops", "late_drops", "max_qdepth", "tx_pkts", "tx_bytes", "send_errors", "ecn_threshold", "ce_marked",
        "int_egress",
    )

    def __init__(self, port: int, send: Callable[[bytes], int], rate_mbps: float, depth_pkts: int,
                 now: float) -> None:
        """rate_mbps: link rate in Mbit/s (0 = unlimited); depth_pkts: queue limit in packets."""
        self.port = port
        self.send = send
        self.depth_pkts = depth_pkts
        self.queue: deque = deque()  # (departure time, frame) not sent yet
        self.finishes: deque[float] = deque()  # departure times of frames in the (virtual) queue
        self.free_at = now
        self.drops = 0
        self.late_drops = 0
        self.max_qdepth = 0
        self.tx_pkts = 0
        self.tx_bytes = 0
        self.send_errors = 0
        self.ecn_threshold = 0  # packets; 0 = no marking (port_config sets it)
        self.ce_marked = 0
        # Writes this switch's INT hop (or strips INT at a sink) as a frame leaves: pipeline.int_engine.
        self.int_egress: Callable[..., bytearray] | None = None
        self.set_rate(rate_mbps)

    def set_rate(self, rate_mbps: float) -> None:
        self.rate_Bps = rate_mbps * 1e6 / 8 if rate_mbps > 0 else 0.0

    @property
    def qdepth(self) -> int:
        return len(self.finishes)

    def enqueue(self, frame, arrival: float, now: float | None = None) -> int:
        """Queue `frame` that arrived at `arrival` (monotonic s); return the depth it saw, -1 if dropped.

        now: the current time (default: arrival); frames due by then are sent at once."""
        if not self.rate_Bps:
            if frame.__class__ is IntPending:
                frame.t_in = arrival  # type: ignore[union-attr]
                frame.t_out = arrival  # type: ignore[union-attr]
            self._transmit(frame)
            return 0
        finishes = self.finishes
        while finishes and finishes[0] <= arrival:
            finishes.popleft()
        depth = len(finishes)
        if depth >= self.depth_pkts or len(self.queue) >= self.depth_pkts + LATE_SLACK_PKTS:
            if depth >= self.depth_pkts:
                self.drops += 1
            else:
                self.late_drops += 1
            return -1
        if self.ecn_threshold and depth >= self.ecn_threshold:
            # starnet.p4 egress: CE when enq_qdepth >= the port's threshold.
            if frame.__class__ is IntPending:
                marked = mark_ce(frame.frame)  # type: ignore[union-attr]
            else:
                if frame.__class__ is not bytearray:
                    frame = bytearray(frame)
                marked = mark_ce(frame)
            self.ce_marked += marked
        start = arrival if arrival > self.free_at else self.free_at
        finish = start + len(frame) / self.rate_Bps
        self.free_at = finish
        finishes.append(finish)
        if depth + 1 > self.max_qdepth:
            self.max_qdepth = depth + 1
        if frame.__class__ is IntPending:
            frame.qdepth = depth  # type: ignore[union-attr]
            frame.t_in = arrival  # type: ignore[union-attr]
            frame.t_out = finish  # type: ignore[union-attr]
        if not self.queue and finish <= (arrival if now is None else now):
            if not self._transmit(frame):
                self.queue.append((finish, frame))
        else:
            self.queue.append((finish, frame))
        return depth

    def service(self, now: float) -> float | None:
        """Send the frames whose departure time has come; return seconds to the next, None if empty."""
        finishes = self.finishes
        while finishes and finishes[0] <= now:
            finishes.popleft()
        queue = self.queue
        while queue:
            due, frame = queue[0]
            if due > now:
                return due - now
            if not self._transmit(frame):
                return 0.0005
            queue.popleft()
        return None

    def _transmit(self, frame) -> bool:
        if frame.__class__ is IntPending:
            if self.int_egress is None:
                frame = frame.frame
            else:
                frame = self.int_egress(frame, self.port, self.tx_bytes & 0xFFFFFFFF)
        try:
            self.send(frame)
        except BlockingIOError:
            return False
        except OSError:
            # The link went away (veth deleted) or similar: the frame is lost, as on a wire.
            self.send_errors += 1
            return True
        self.tx_pkts += 1
        self.tx_bytes += len(frame)
        return True

    def stats(self) -> dict[str, int | float]:
        return {
            "qdepth_pkts": len(self.finishes),
            "late_drops": self.late_drops,
            "max_qdepth_pkts": self.max_qdepth,
            "queue_drops": self.drops,
            "tx_pkts": self.tx_pkts,
            "tx_bytes": self.tx_bytes,
            "send_errors": self.send_errors,
            "rate_mbps": self.rate_Bps * 8 / 1e6,
            "depth_pkts": self.depth_pkts,
            "ecn_threshold_pkts": self.ecn_threshold,
            "ce_marked": self.ce_marked,
        }
