"""Per-port egress queue drained at the link's capacity by a token bucket, tail drop at a depth in packets.

This is where a link-rate limit lives (inside the switch, visible to telemetry), as BMv2's
egress queue rate/depth would be; the Linux side of the veth has no qdisc doing it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from softswitch.inband import IntPending
from softswitch.pipeline import mark_ce

MAX_FRAME = 9018
BUCKET_DEPTH_S = 0.001  # ~1 ms of tokens: holds 1-100 Mbit/s within ~1.5% (measured)
# While frames wait, the wire is busy without pause: a late wake-up (scheduler jitter) may send what
# would have left meanwhile, up to this much link time, so jitter costs no throughput.
BACKLOG_CATCHUP_S = 0.010


class EgressQueue:
    __slots__ = (
        "port", "send", "rate_Bps", "burst", "catchup", "tokens", "last", "depth_pkts", "queue",
        "drops", "drop_bytes", "max_qdepth", "tx_pkts", "tx_bytes", "send_errors", "send_error_bytes",
        "ecn_threshold", "ce_marked",
        "int_egress", "due",
    )

    def __init__(self, port: int, send: Callable[[bytes | bytearray], int], rate_mbps: float, depth_pkts: int,
                 now: float) -> None:
        """rate_mbps: drain rate in Mbit/s (0 = unlimited); depth_pkts: queue limit in packets."""
        self.port = port
        self.send = send
        self.depth_pkts = depth_pkts
        self.queue: deque[bytes | bytearray | IntPending] = deque()
        self.drops = 0
        self.drop_bytes = 0
        self.max_qdepth = 0
        self.tx_pkts = 0
        self.tx_bytes = 0
        self.send_errors = 0
        self.send_error_bytes = 0
        self.ecn_threshold = 0  # packets; 0 = no marking (port_config sets it)
        self.ce_marked = 0
        # Writes this switch's INT hop (or strips INT at a sink) as a frame leaves: pipeline.int_engine.
        self.int_egress: Callable[[IntPending, int, int, float], bytearray] | None = None
        # Monotonic time the head of a backlogged queue may leave at the port's rate (0 = not
        # waiting for tokens): the ideal schedule a departure's lateness is measured against.
        self.due = 0.0
        self.last = now
        self.set_rate(rate_mbps)

    def set_rate(self, rate_mbps: float) -> None:
        self.rate_Bps = rate_mbps * 1e6 / 8 if rate_mbps > 0 else 0.0
        # At least one maximal frame plus ~1 ms, so any frame can eventually leave.
        self.burst = max(self.rate_Bps * BUCKET_DEPTH_S, 1514.0) + 1514.0 if self.rate_Bps else 0.0
        self.catchup = max(self.burst, self.rate_Bps * BACKLOG_CATCHUP_S)
        self.tokens = self.burst

    @property
    def qdepth(self) -> int:
        return len(self.queue)

    def _refill(self, now: float, cap: float) -> None:
        tokens = self.tokens + (now - self.last) * self.rate_Bps
        self.tokens = tokens if tokens < cap else cap
        self.last = now

    def enqueue(self, frame: bytes | bytearray | IntPending, now: float) -> int:
        """Queue or send `frame`; return the queue depth (packets) it saw at enqueue, -1 if dropped."""
        queue = self.queue
        depth = len(queue)
        if depth:
            if depth >= self.depth_pkts:
                self.drops += 1
                self.drop_bytes += len(frame)
                return -1
            # `__class__ is` rather than isinstance (the hot path); mypy narrows only the positive test.
            if frame.__class__ is IntPending:
                frame.qdepth = depth
            if self.ecn_threshold and depth >= self.ecn_threshold:
                # starnet.p4 egress: CE when enq_qdepth >= the port's threshold.
                if frame.__class__ is IntPending:
                    marked = mark_ce(frame.frame)
                else:
                    if frame.__class__ is not bytearray:
                        frame = bytearray(frame)  # type: ignore[arg-type]  # bytes here
                    marked = mark_ce(frame)
                self.ce_marked += marked
            queue.append(frame)
            if depth + 1 > self.max_qdepth:
                self.max_qdepth = depth + 1
            return depth
        if not self.rate_Bps:
            self._transmit(frame, now)
            return 0
        self._refill(now, self.burst)
        size = len(frame)
        if self.tokens >= size:
            if self._transmit(frame, now):
                self.tokens -= size
                return 0
        else:
            self.due = now + (size - self.tokens) / self.rate_Bps
        queue.append(frame)
        if self.max_qdepth == 0:
            self.max_qdepth = 1
        return 0

    def enqueue_control(self, frame: bytes, now: float) -> None:
        """A frame from the controller (packet-out: link probes): ahead of the data and never
        tail-dropped, as a switch's strict-priority control queue sends it. A probe queued behind
        64 data frames, or dropped with them, would make a congested link look like a failed one."""
        if self.queue:
            self.queue.appendleft(frame)
        else:
            self.enqueue(frame, now)

    def _transmit(self, frame: bytes | bytearray | IntPending, now: float) -> bool:
        if frame.__class__ is IntPending:
            if self.int_egress is None:
                frame = frame.frame
            else:
                frame = self.int_egress(frame, self.port, self.tx_bytes & 0xFFFFFFFF, now)
        try:
            self.send(frame)  # type: ignore[arg-type]  # bytes or bytearray here
        except BlockingIOError:
            return False
        except OSError:
            # The link went away (veth deleted) or similar: the frame is lost, as on a wire.
            self.send_errors += 1
            self.send_error_bytes += len(frame)
            return True
        self.tx_pkts += 1
        self.tx_bytes += len(frame)
        return True

    def service(self, now: float) -> float | None:
        """Send what the bucket allows; return seconds until the head can leave, None if empty.

        Sets `due` to the time the new head may leave (0 when the queue is empty or the wire,
        not the rate, held it back)."""
        queue = self.queue
        self.due = 0.0
        if not queue:
            return None
        if not self.rate_Bps:
            while queue:
                if not self._transmit(queue[0], now):
                    return 0.0005
                queue.popleft()
            return None
        self._refill(now, self.catchup)
        while queue:
            size = len(queue[0])
            if self.tokens < size:
                wait = (size - self.tokens) / self.rate_Bps
                self.due = now + wait
                return wait
            if not self._transmit(queue[0], now):
                return 0.0005
            self.tokens -= size
            queue.popleft()
        return None

    def stats(self) -> dict[str, int | float]:
        return {
            "qdepth_pkts": len(self.queue),
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
