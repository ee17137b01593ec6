"""Port I/O and the forwarding loop of one soft switch process.

One AF_PACKET socket per port (softswitch/portio.py), all polled by a single thread (and one more
per port that takes only 802.1Q-tagged frames); each wake-up drains a batch per
readable port, runs ingress, and queues the result on the egress port's token bucket
(one process per switch, poll, drain a batch per wake-up). Packet-outs from the
P4Runtime thread arrive through a queue and a wake-up pipe. The link probes of the switch's
device config (wire/probes.py) are sent by the forwarding thread itself, on its own timer: no
packet-out, no stream message, no extra wake-up; while it sends them, the probes it receives are
punted together once a period, at its tick (each carries its send time, so the controller's
judgement is unchanged; it hears of a probe up to a period later).

The forwarding thread never touches a file: on ext4 here, replacing the stats file (write and
rename) blocked it 4-27 ms at a time — the largest share of the late windows a real-time switch
still had. A housekeeping thread writes the stats and the fidelity lines and follows the faults
file; the forwarding thread picks changed faults up at its next link poll.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from softswitch.egress import MAX_FRAME, EgressQueue
from softswitch.inband import IntPending
from softswitch.pipeline import Pipeline
from softswitch.portio import ANCILLARY_BYTES, kernel_stamp, open_port_socket
from wire.cpu import REASON_PROBE
from wire.drops import DROP_INDEX
from wire.faultsfile import Followed
from wire.fidelity import WINDOW_S, FidelityWindows, wall_offset
from wire.linkstate import read_carrier
from wire.probes import ProbeSchedule, probe_frame

log = logging.getLogger("softswitch.dataplane")

BAD_FRAME_LOGS = 5  # tracebacks logged per kind of pipeline failure; the rest are only counted
VLAN_TAG_BYTES = 4
RX_BATCH = 64
LINK_POLL_S = 0.05
STATS_PERIOD_S = 0.5


@dataclass(frozen=True)
class PortSpec:
    """port: P4 port number; iface: Linux interface; rate_mbps: egress drain rate (0 = line rate);
    depth_pkts: egress queue depth in packets."""

    port: int
    iface: str
    rate_mbps: float = 0.0
    depth_pkts: int = 64


QUEUE_FULL = DROP_INDEX["queue_full"]
SEND_ERROR = DROP_INDEX["send_error"]


def probe_tick(now: float, device_id: int, period_s: float) -> float:
    """A switch's next probe time after `now`: on the period's grid of the machine's clock, at a
    phase of its own (the golden ratio's spread of device ids), so that the switches' probes do
    not all leave, arrive and wake their receivers at one instant (20 switches at once on 2 cores
    held some 5 ms: most windows flagged late)."""
    phase = (device_id * 0.6180339887) % 1.0 * period_s
    return ((now - phase) // period_s + 1) * period_s + phase


class DataPlane:
    def __init__(self, pipeline: Pipeline, ports: list[PortSpec], cpu_port: int,
                 stats_file: Path | None = None, fidelity: FidelityWindows | None = None,
                 faults_file: Path | None = None) -> None:
        """fidelity: where this switch's lateness goes (None: not measured); faults_file: injected
        faults to follow (read_faults)."""
        self.pipeline = pipeline
        self.fidelity = fidelity
        self.specs = {p.port: p for p in ports}
        self.cpu_port = cpu_port
        self.stats_file = stats_file
        self.pending_out: deque[tuple[int, bytes]] = deque()
        # Set by the P4Runtime thread (set_probes), read by the forwarding one: (device id, schedule)
        self.probes: tuple[int, ProbeSchedule] | None = None
        self.probes_sent = 0
        self.faults = Followed(faults_file) if faults_file is not None else None
        # Read by the housekeeping thread, applied by the forwarding one (deque: atomic hand-over, latest wins)
        self.faults_due: deque[dict] = deque(maxlen=1)
        self.delay_s = 0.0  # injected processing delay: every forwarded frame waits this long before its queue
        self.delayed: deque[tuple[float, int, bytearray | IntPending, int]] = deque()  # (due, port, frame, in)
        self.bad_frame_kinds: dict[str, int] = {}  # exception type -> frames the pipeline failed on
        self.stop_event = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        now = time.monotonic()
        self.sockets: dict[int, socket.socket] = {}
        self.tagged_sockets: dict[int, socket.socket] = {}  # 802.1Q frames only: dropped as non_ipv4
        self.egress: dict[int, EgressQueue] = {}
        for spec in ports:
            sock = open_port_socket(spec.iface, timestamps=fidelity is not None)
            self.sockets[spec.port] = sock
            self.tagged_sockets[spec.port] = open_port_socket(spec.iface, timestamps=False, tagged=True)
            self.egress[spec.port] = EgressQueue(spec.port, sock.send, spec.rate_mbps, spec.depth_pkts, now)
            self.egress[spec.port].int_egress = pipeline.int_engine.egress
            pipeline.port_up[spec.port] = read_carrier(spec.iface)
        # Port counters are kept here per batch and folded into the P4 counters port_rx/port_tx
        # when those are read (P4Runtime Read) and with every stats write.
        self.rx_pkts = dict.fromkeys(self.specs, 0)
        self.rx_bytes = dict.fromkeys(self.specs, 0)
        self._synced: dict[tuple[str, int], int] = {}
        pipeline.add_counter_sync(self.sync_counters)
        self.started = time.time()

    # ---- called from other threads -----------------------------------------------------------
    def inject(self, egress_port: int, frame: bytes) -> None:
        """Queue a packet-out for `egress_port` (thread-safe)."""
        self.pending_out.append((egress_port, frame))
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def set_probes(self, device_id: int, schedule: ProbeSchedule | None) -> None:
        """Send these link probes from now on (None: none); thread-safe, takes effect at once."""
        unknown = sorted(set(schedule.ports) - set(self.egress)) if schedule is not None else []
        if unknown:
            raise ValueError(f"no port {unknown[0]} to send probes from")
        self.probes = (device_id, schedule) if schedule is not None else None
        if schedule is not None:
            log.info("sending link probes every %.0f ms out of ports %s", schedule.period_s * 1000,
                     ",".join(map(str, sorted(schedule.ports))))
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def stop(self) -> None:
        self.stop_event.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        poller = select.epoll()
        by_fd: dict[int, tuple[int, socket.socket]] = {}
        for port, sock in self.sockets.items():
            poller.register(sock.fileno(), select.EPOLLIN)
            by_fd[sock.fileno()] = (port, sock)
        tagged_by_fd: dict[int, tuple[int, socket.socket]] = {}
        for port, sock in self.tagged_sockets.items():
            poller.register(sock.fileno(), select.EPOLLIN)
            tagged_by_fd[sock.fileno()] = (port, sock)
        poller.register(self._wake_r, select.EPOLLIN)
        pipeline = self.pipeline
        egress = self.egress
        busy: set[int] = set()
        next_link_poll = next_stats = next_window = next_probe = 0.0
        probes_seen = None
        config_seen = -1
        timeout = 0.0  # first pass at once: link states and the first stats file
        monotonic = time.monotonic
        fid = self.fidelity
        offset = wall_offset()
        try:
            while not self.stop_event.is_set():
                events = poller.poll(timeout)
                now = monotonic()
                if fid is not None and now >= next_window:
                    fid.tick(now + offset, self.total_drops())
                    next_window = (int((now + offset) / WINDOW_S) + 1) * WINDOW_S - offset
                if pipeline.config_generation != config_seen:
                    config_seen = pipeline.config_generation
                    for port, port_queue in egress.items():
                        port_queue.ecn_threshold = pipeline.ecn_thresholds.get(port, 0)
                for fd, _ in events:
                    if fd == self._wake_r:
                        self._drain_wake(now, busy)
                        continue
                    if fd in tagged_by_fd:
                        self._drop_tagged(*tagged_by_fd[fd])
                        continue
                    in_port, sock = by_fd[fd]
                    recv = sock.recv
                    ingress = pipeline.ingress
                    count = nbytes = 0
                    for _ in range(RX_BATCH):
                        try:
                            if count or fid is None:
                                frame = recv(MAX_FRAME)
                            else:
                                # The batch's oldest frame: how long it waited for this switch.
                                frame, ancdata, _, _ = sock.recvmsg(MAX_FRAME, ANCILLARY_BYTES)
                                stamp = kernel_stamp(ancdata)
                                if stamp is not None:
                                    wall = monotonic() + offset
                                    fid.ingress_late(max(0.0, wall - stamp), wall)
                        except BlockingIOError:
                            break
                        except OSError as exc:
                            log.warning("port %d: receive failed: %s", in_port, exc)
                            break
                        count += 1
                        nbytes += len(frame)
                        try:
                            result = ingress(frame, in_port, now)
                        except Exception as exc:  # noqa: BLE001 - no frame may end the data plane
                            self._bad_frame(exc, frame, in_port)
                            continue
                        if result is None:
                            continue
                        out_port, out = result
                        if self.delay_s:
                            self.delayed.append((now + self.delay_s, out_port, out, in_port))
                        else:
                            self._forward(out_port, out, in_port, now, busy)
                    self.rx_pkts[in_port] += count
                    self.rx_bytes[in_port] += nbytes
                    if fid is not None:
                        fid.events += count
                now = monotonic()
                wait = self._release_delayed(now, busy) if self.delayed else None
                for port in list(busy):
                    queue = egress[port]
                    if fid is not None and queue.due and now > queue.due:
                        fid.egress_late(now - queue.due, now + offset)
                    delay = queue.service(now)
                    if delay is None:
                        busy.discard(port)
                    elif wait is None or delay < wait:
                        wait = delay
                if now >= next_link_poll:
                    self._poll_links()
                    if self.faults_due:
                        self.apply_faults()
                    next_link_poll = now + LINK_POLL_S
                if now >= next_stats:
                    offset = wall_offset()  # follows a slewing wall clock
                    next_stats = now + STATS_PERIOD_S
                probes = self.probes
                if probes is not probes_seen:  # a new schedule starts at once
                    probes_seen, next_probe = probes, now
                    self._punt_held_probes()
                    pipeline.held_probes = [] if probes is not None else None
                if probes is not None:
                    if now >= next_probe:
                        self._punt_held_probes()
                        self._send_probes(*probes, now, busy)
                        next_probe = probe_tick(now, probes[0], probes[1].period_s)
                    horizon = min(next_link_poll, next_stats, next_probe) - now
                else:
                    horizon = min(next_link_poll, next_stats) - now
                timeout = max(0.0, min(wait if wait is not None else horizon, horizon))
        finally:
            poller.close()
            self.stop_event.set()

    def finish(self) -> None:
        """The last fidelity window and stats, once the forwarding and housekeeping threads ended."""
        self._punt_held_probes()
        if self.fidelity is not None:
            self.fidelity.close(drops_total=self.total_drops())
        if self.stats_file is not None:
            self.write_stats()

    def housekeep(self) -> None:
        """The housekeeping thread's loop until stop(): the stats file every STATS_PERIOD_S, the
        fidelity lines as windows close, the faults file every LINK_POLL_S."""
        next_stats = 0.0
        while not self.stop_event.wait(LINK_POLL_S):
            if self.fidelity is not None:
                self.fidelity.flush()
            if self.faults is not None:
                self.read_faults()
            now = time.monotonic()
            if self.stats_file is not None and now >= next_stats:
                self.write_stats()
                next_stats = now + STATS_PERIOD_S

    def _spin(self, spin_s: float) -> None:
        """An injected runaway (faults {"spin_ms": N}): hold the CPU N ms without sleeping, once."""
        log.warning("injected fault: spinning %.0f ms without sleeping", spin_s * 1000)
        until = time.monotonic() + spin_s
        while time.monotonic() < until:
            pass

    def _release_delayed(self, now: float, busy: set[int]) -> float | None:
        """Frames whose injected delay is over go to their queues; the time until the next is due."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, out_port, out, in_port = delayed.popleft()
            self._forward(out_port, out, in_port, now, busy)
        return delayed[0][0] - now if delayed else None

    def _forward(self, out_port: int, out: bytearray | IntPending, in_port: int, now: float, busy: set[int]) -> None:
        """A frame ingress let through: into its egress queue (the port then busy), or to the CPU."""
        queue = self.egress.get(out_port)
        if queue is None:
            self._to_cpu_or_drop(out_port, out, in_port)
            return
        queue.enqueue(out, now)
        if queue.queue:
            busy.add(out_port)

    def read_faults(self) -> None:
        """Injected faults, when their file changed (housekeeping thread): {"delay_ms": D, "rates":
        {"PORT": MBPS}, "spin_ms": S} — every forwarded frame held D ms (a slow switch), ports
        drained at MBPS instead of their rate (a port running below its capacity; absent ports get
        their own back), and once S ms of spinning without sleeping (a runaway switch). A bad file
        is logged and leaves the faults as they were; good ones wait in faults_due for apply_faults."""
        assert self.faults is not None
        try:
            faults = self.faults.changed()
            if faults is None:
                return
            delay_ms = float(faults.get("delay_ms", 0.0))
            spin_ms = float(faults.get("spin_ms", 0.0))
            rates = {int(port): float(mbps) for port, mbps in faults.get("rates", {}).items()}
            if delay_ms < 0 or spin_ms < 0 or any(mbps <= 0 or port not in self.specs for port, mbps in rates.items()):
                raise ValueError("delay_ms and spin_ms must be >= 0, rates need ports of this switch and rates > 0: "
                                 f"{faults}")
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.error("faults file %s: %s (faults unchanged)", self.faults.path, exc)
            return
        self.faults_due.append({"delay_s": delay_ms / 1000, "rates": rates, "spin_s": spin_ms / 1000})

    def apply_faults(self) -> None:
        """The faults read_faults found (forwarding thread: the queues and the delay line are its own)."""
        try:
            faults = self.faults_due.popleft()
        except IndexError:
            return
        self.delay_s = faults["delay_s"]
        for port, spec in self.specs.items():
            self.egress[port].set_rate(faults["rates"].get(port, spec.rate_mbps))
        log.warning("injected faults: processing delay %g ms, port rates %s", faults["delay_s"] * 1000,
                    faults["rates"] or "as configured")
        if faults["spin_s"]:
            self._spin(faults["spin_s"])

    def total_drops(self) -> int:
        """Tail drops of all egress queues so far."""
        return sum(queue.drops for queue in self.egress.values())

    def _drop_tagged(self, in_port: int, sock: socket.socket) -> None:
        """802.1Q frames: received (port_rx, with the 4 bytes of their tag) and dropped as non_ipv4,
        as starnet.p4 on BMv2 does."""
        for _ in range(RX_BATCH):
            try:
                size = len(sock.recv(MAX_FRAME)) + VLAN_TAG_BYTES
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("port %d: receive failed: %s", in_port, exc)
                return
            self.rx_pkts[in_port] += 1
            self.rx_bytes[in_port] += size
            self.pipeline.count_drop("non_ipv4", in_port, size)

    def _drain_wake(self, now: float, busy: set[int]) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while self.pending_out:
            port, frame = self.pending_out.popleft()
            queue = self.egress.get(port)
            if queue is None:
                log.warning("packet-out to unknown port %d dropped", port)
                continue
            queue.enqueue_control(frame, now)
            if queue.queue:
                busy.add(port)

    def _punt_held_probes(self) -> None:
        """The probes received since the last tick, to the controller together: one wake-up of the
        stream's thread a period instead of one a probe (their send times are in them)."""
        held = self.pipeline.held_probes
        if held:
            self.pipeline.held_probes = []
            for frame, in_port in held:
                self.pipeline.to_cpu(frame, in_port, REASON_PROBE)

    def _send_probes(self, device_id: int, schedule: ProbeSchedule, now: float, busy: set[int]) -> None:
        """One probe out of each port of the schedule, stamped `now`, through the port's queue as a
        packet-out would go."""
        for port, mac in schedule.ports.items():
            queue = self.egress[port]
            queue.enqueue_control(probe_frame(mac, device_id, port, now), now)
            if queue.queue:
                busy.add(port)
        self.probes_sent += len(schedule.ports)

    def _to_cpu_or_drop(self, out_port: int, frame: bytes | bytearray | IntPending, in_port: int) -> None:
        if isinstance(frame, IntPending):  # INT toward a port without a queue: the frame as it is
            frame = frame.frame
        if out_port == self.cpu_port:
            self.pipeline.to_cpu(frame, in_port, 0)
        else:
            self.pipeline.count_drop("no_route", in_port, len(frame))

    def _poll_links(self) -> None:
        for port, spec in self.specs.items():
            up = read_carrier(spec.iface)
            if self.pipeline.port_up.get(port) != up:
                log.info("port %d (%s) is %s", port, spec.iface, "up" if up else "down")
            self.pipeline.set_port_up(port, up)

    def sync_counters(self) -> None:
        """Add what the ports counted since the last call to the P4 counters (under the state lock)."""
        pipeline = self.pipeline
        with pipeline.state.lock:
            for port in self.specs:
                queue = self.egress[port]
                lost = pipeline.lost_on_link.get(port, (0, 0))  # never received, as in starnet.p4
                for key, value, target in (
                    ("rxp", self.rx_pkts[port] - lost[0], pipeline.rx_packets),
                    ("rxb", self.rx_bytes[port] - lost[1], pipeline.rx_bytes),
                    ("txp", queue.tx_pkts, pipeline.tx_packets),
                    ("txb", queue.tx_bytes, pipeline.tx_bytes),
                ):
                    self._fold(key, port, value, target, port)
                # The queues' drops go into the P4 counter drop_reason like the pipeline's.
                for key, value, target, index in (
                    ("qdp", queue.drops, pipeline.reason_packets, QUEUE_FULL),
                    ("qdb", queue.drop_bytes, pipeline.reason_bytes, QUEUE_FULL),
                    ("sep", queue.send_errors, pipeline.reason_packets, SEND_ERROR),
                    ("seb", queue.send_error_bytes, pipeline.reason_bytes, SEND_ERROR),
                ):
                    self._fold(key, port, value, target, index)

    def _fold(self, key: str, port: int, value: int, target: list[int], index: int) -> None:
        """Add what `value` (a running total for `port`) grew by since the last fold to target[index]."""
        last = self._synced.get((key, port), 0)
        if value != last and index < len(target):
            target[index] += value - last
        self._synced[(key, port)] = value

    # ---- visibility --------------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            "time": time.time(),
            "uptime_s": time.time() - self.started,
            "int_clock_epoch_wall": self.pipeline.int_engine.epoch_wall,
            "drops": self.pipeline.drop_counts(),
            "flow_cache_entries": len(self.pipeline.flow_cache),
            "int_reports": self.pipeline.int_engine.reports,  # INT reports sent to the controller
            "int_reports_rate_limited": self.pipeline.int_engine.rate_limited,
            "int_reports_lost": self.pipeline.int_engine.reports_lost,  # no controller took them
            "probes_sent": self.probes_sent,  # link probes this switch sent itself (wire/probes.py)
            "pipeline_failures": dict(self.bad_frame_kinds),
            "fidelity": self.fidelity.summary() if self.fidelity is not None else None,
            "ports": {
                str(port): {"iface": self.specs[port].iface, "up": self.pipeline.port_up.get(port, False),
                            **queue.stats()}
                for port, queue in self.egress.items()
            },
        }

    def _bad_frame(self, exc: Exception, frame: bytes, in_port: int) -> None:
        """A frame the pipeline could not handle: counted as malformed, dropped; the first few
        tracebacks of each kind are logged with the frame's bytes, the rest counted."""
        self.pipeline.count_drop("malformed", in_port, len(frame))
        kind = type(exc).__name__
        seen = self.bad_frame_kinds[kind] = self.bad_frame_kinds.get(kind, 0) + 1
        if seen <= BAD_FRAME_LOGS:
            log.error("port %d: dropped a %d-byte frame the pipeline failed on (%s, %d of this kind): %s",
                      in_port, len(frame), kind, seen, frame[:64].hex(), exc_info=exc)

    def write_stats(self) -> None:
        assert self.stats_file is not None
        self.sync_counters()
        tmp = self.stats_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.stats(), indent=1))
        tmp.replace(self.stats_file)

    def close(self) -> None:
        for sock in (*self.sockets.values(), *self.tagged_sockets.values()):
            sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
