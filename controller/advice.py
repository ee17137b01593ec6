"""The advice loop: demands from INT and from workloads → advisor → per-host rate advice streams.

The loop wakes when its inputs change — the collector's flows, paths and queues (its change
listener: a new report, a congested report, expired state) or the declared demands — and when a
refresh is due; it recomputes the advice at most once per `interval_s` (default 1 ms; a declaration or a mode change
is taken at once), sends each
host only what changed (plus a refresh before advice would expire), and logs every decision to
``advice.csv`` in the run directory. It reads the collector only through its snapshots. Modes:
``none``, ``ecn`` and ``bbr`` send no advice (hosts run at line rate with cubic; in ``ecn`` their
TCP negotiates ECN; in ``bbr`` it is BBR: hostagent/tcpsettings.py), ``advice`` runs this loop,
``paths`` runs it over the placement of controller/paths.py: each decision first places the
active flows on paths (pinned in the switches by the flow_pin updates it hands to ``on_writes``),
then rates every host pair over the paths its flows were given; ``flowlet`` sends no advice and turns
the switches' flowlet switching on (flowlet_config: a flow's packets more than `flowlet_gap_us`
apart are hashed afresh, LetFlow's in-network answer to the same problem).

A demand is a host pair with a flow INT saw carry data lately (`hold_s`): before ELEPHANT_REPORTS of
its reports carried some, for a few report gaps at its NIC's rate (MOUSE_TIMEOUT_S and more on a slow
NIC) — a reply or an idle connection's message does not take a transfer's share; after, for a dozen
report gaps at the rate it was advised — a burst that ended gives its share back.
And only while it carries data at a transfer's rate (`transfers`): once INT has measured a flow's
rate, it is a demand from TRANSFER_SHARE of its NIC's rate on, and stays one down to CHATTER_SHARE;
below, it is chatter — a collective's connection carrying its peer's small notifications (Gloo's
ring: each rank sends its right neighbour the data and its left one a few bytes per segment) —
unpaced (its few kbit/s fit in the η headroom), and the NIC is the transfer's. Counted as a
transfer, that chatter halved every rank's rate for a PyTorch all-reduce (0.52x of mode none).
A flow is a demand at all only once INT showed it carry a full segment (FlowPath.bulk: BULK_PAYLOAD
bytes or more) or measured it as a transfer: a collective's barrier or a notification is a few
small messages between many pairs, and each of them, a demand at its NIC's rate for a few report
gaps, halved a ring's transfer into the same NIC or host for ~0.2 s — with PyTorch's Gloo ring, a
ring pair was paced for 1-6 s of a 30 s run, and the ring runs at its slowest pair's pace.
"""

from __future__ import annotations

import asyncio
import csv
import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from controller import entities as ent
from controller.advisor import AdvisorParams, Demand, LinkState, advise, changed
from controller.paths import FlowKey, PathScheduler
from controller.program import INT_SAMPLE_LOG2
from controller.routing import Route
from controller.telemetry import RATE_WINDOW_S, Collector, FlowPath, TelemetrySnapshot
from topologies.addressing import AddressPlan
from topologies.spec import LinkId, Topology, egress_link, nic_link
from wire import runfiles
from wire.p4info import P4Schema
from wire.proto import p4r

log = logging.getLogger("controller.advice")
T = TypeVar("T")

MODES = ("none", "ecn", "advice", "bbr", "paths", "flowlet")
ADVISED = ("advice", "paths")  # the modes in which hosts get rate advice
FabricWriter = Callable[[dict[str, list[p4r.Update]]], None]
FLOWLET_GAP_US = 5000  # default flowlet gap: a few of the fabric's RTTs (~1-2 ms at 20 Mbit/s, with queues)
FLOW_TIMEOUT_S = 1.0  # a flow without INT reports for this long is over
# A flow INT showed carry data in fewer than ELEPHANT_REPORTS reports (a reply, a control message,
# a collective's idle connection) is a demand only this long after its last data — at least
# MOUSE_TIMEOUT_S, and at least MOUSE_REPORT_GAPS of the gaps between a full-rate flow's sampled
# reports at its NIC's rate (1 Mbit/s: 8 frames are 97 ms), so that a new transfer keeps its share
# until its next reports come. Held for FLOW_TIMEOUT_S, a one-packet reply halved its host's NIC
# for the host's own transfer for a second. A transfer is held TRANSFER_REPORT_GAPS gaps at the
# rate it was advised (hold_s): INT samples a packet at random (1 in 2^int_sample_log2), so gaps are
# geometric and one longer than n mean gaps comes once in about e^n reports — 4 gaps: 1 report in 55,
# about once a run for each 3 Mbit/s flow of an incast, whose pacing then went and whose burst queued
# at the bottleneck (the likely cause of a CI run's p99 of 11 packets there, against 2-3); 12 gaps:
# 1 report in 160,000.
MOUSE_TIMEOUT_S = 0.2
MOUSE_REPORT_GAPS = 4
TRANSFER_REPORT_GAPS = 12
ELEPHANT_REPORTS = 2  # mode paths places a flow once this many of its INT reports carried data
PLACED_TIMEOUT_S = 3.0  # ... and forgets it this long after its last data
TRANSFER_SHARE = 0.02  # a measured flow is a transfer from this share of its NIC's rate ...
CHATTER_SHARE = 0.005  # ... and stays one down to this share
SUBSCRIBER_QUEUE = 4096
IDLE_WAKE_S = 0.1  # with nothing changing, the loop still looks this often (expiring flows, refreshes)
DEFAULT_PARAMS = AdvisorParams()


class AdviceError(ValueError):
    """A request that cannot be taken; the message names the field."""


@dataclass
class Declared:
    src: str
    dst: str
    weight: float
    cap_bps: float | None


class AdviceLoop:
    def __init__(self, topo: Topology, plan: AddressPlan, collector: Collector, run_dir: Path,
                 mode: str = "none", params: AdvisorParams = DEFAULT_PARAMS, interval_s: float = 0.001,
                 valid_ms: int = 2000, flowlet_gap_us: int = FLOWLET_GAP_US,
                 int_sample_log2: int | None = INT_SAMPLE_LOG2) -> None:
        if mode not in MODES:
            raise AdviceError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
        self.topo, self.plan, self.collector = topo, plan, collector
        self.params, self.interval_s, self.valid_ms = params, interval_s, valid_ms
        # Advice moves only by more than this (relative): every change re-arms a host's HTB class,
        # and small steady corrections cost more in bursts than they gain.
        self.tolerance = 0.05
        self.mode = mode
        self.host_by_ip = {a.ip: name for name, a in plan.hosts.items()}
        self.subscribers: dict[str, list[asyncio.Queue]] = {}
        self.registered: dict[str, str] = {}  # host name → ip
        self.declared: dict[tuple[str, str], Declared] = {}
        self.sent: dict[tuple[str, str], float] = {}  # (src ip, dst ip) → advised bit/s
        self.sent_at: dict[tuple[str, str], float] = {}
        self.epoch = 0
        self.decisions = 0
        self._inputs_seen: tuple | None = None
        self._series = (run_dir / runfiles.ADVICE).open("a", newline="")
        self._writer = csv.writer(self._series)
        if self._series.tell() == 0:
            self._writer.writerow(["time", "epoch", "src", "dst", "rate_bps", "reason"])
        self.capacity: dict[LinkId, float] = topo.link_capacities_bps()
        self.full_capacity = dict(self.capacity)
        self.sample_factor = 1 << max(0, int_sample_log2 or 0)  # INT's packets per sampled packet
        self.report_gap_bits = self.sample_factor * self.params.mtu_bytes * 8  # sent per sampled report
        self.mouse_timeout_s = {address.ip: max(MOUSE_TIMEOUT_S, MOUSE_REPORT_GAPS * self.report_gap_bits
                                                / self.capacity[nic_link(name)])
                                for name, address in plan.hosts.items()}
        self.transfers: set[FlowKey] = set()  # measured flows at a transfer's rate (hysteresis)
        self.chatter: set[FlowKey] = set()  # measured flows below it: no demand, not placed
        self.steps = 0  # decisions taken (each step() in mode advice that got past "nothing changed")
        # Mode paths: the placement (its capacities are these, shrunk by failures) and where its
        # flow_pin updates go (the controller writes them; by default nowhere).
        self.paths = PathScheduler(topo, plan, self.capacity)
        self.on_writes: FabricWriter = lambda updates: None
        self.flowlet_gap_us = flowlet_gap_us
        self.schema_of: Callable[[str], P4Schema] | None = None
        self._wake = asyncio.Event()  # set by the collector's change listener and by declarations
        # Set by declarations and mode changes only: they are rare and explicit, so they skip the
        # per-interval limit that keeps a stream of INT reports from spinning the loop.
        self._urgent = asyncio.Event()
        collector.on_change(self._wake.set)

    # ---- requests -----------------------------------------------------------------------------
    def register(self, name: str, ip: str) -> None:
        if name not in self.plan.hosts:
            raise AdviceError(f"HostInfo.name: no host {name!r} in topology {self.topo.name}")
        _check_ip(ip, "HostInfo.ip")
        if self.plan.hosts[name].ip != ip:
            raise AdviceError(f"HostInfo.ip: host {name} has address {self.plan.hosts[name].ip}, not {ip}")
        self.registered[name] = ip

    def subscribe(self, name: str) -> asyncio.Queue:
        if name not in self.registered:
            raise AdviceError(f"SubscribeRequest.host: {name!r} has not registered")
        queue: asyncio.Queue = asyncio.Queue(SUBSCRIBER_QUEUE)
        self.subscribers.setdefault(name, []).append(queue)
        queue.put_nowait(("mode", self.mode))
        ip = self.registered[name]
        for (src, dst), rate in self.sent.items():  # a (re)connecting host gets the advice in force
            if src == ip:
                queue.put_nowait(("advice", dst, rate))
        return queue

    def unsubscribe(self, name: str, queue: asyncio.Queue) -> None:
        queues = self.subscribers.get(name, [])
        if queue in queues:
            queues.remove(queue)

    def declare(self, src: str, dst: str, rate_bps: int | None, weight: float, stop: bool) -> int:
        _check_ip(src, "DemandRequest.src")
        _check_ip(dst, "DemandRequest.dst")
        for field_name, ip in (("src", src), ("dst", dst)):
            if ip not in self.host_by_ip:
                raise AdviceError(f"DemandRequest.{field_name}: {ip} is not a host of this fabric")
        if src == dst:
            raise AdviceError("DemandRequest.dst: equals src")
        if weight < 0:
            raise AdviceError(f"DemandRequest.weight: must be >= 0, got {weight}")
        if stop:
            self.declared.pop((src, dst), None)
        else:
            self.declared[(src, dst)] = Declared(src, dst, weight or 1.0, float(rate_bps) if rate_bps else None)
        self._wake.set()
        self._urgent.set()
        return len(self.declared)

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise AdviceError(f"ModeRequest.mode: {mode!r} is not one of {', '.join(MODES)}")
        if mode == self.mode:
            return
        flowlet_changed = "flowlet" in (mode, self.mode)
        self.mode = mode
        log.info("mode %s", mode)
        for queues in self.subscribers.values():
            for queue in queues:
                _put(queue, ("mode", mode))
        if mode not in ADVISED:
            self._send({key: 0.0 for key in self.sent}, "clear")
            self.sent.clear()
        if mode != "paths":
            self._write_pins(clear=True)  # flows hash again
            self.paths.clear()
        if flowlet_changed and self.schema_of is not None:
            self.on_writes({s.name: [self.flowlet_update(self.schema_of(s.name))] for s in self.topo.switches})
        self._inputs_seen = None  # decide afresh in the new mode
        self._wake.set()
        self._urgent.set()

    def set_links(self, ends: list[tuple[str, int]], up: bool) -> None:
        """A fabric link failed (or came back): its directions leave (rejoin) the capacities the
        advisor shares out, and demands whose INT path crossed it count only their other links
        until INT shows their new path. Decided afresh at once."""
        for switch, port in ends:
            link = egress_link(switch, port)
            if up and link in self.full_capacity:
                self.capacity[link] = self.full_capacity[link]
            else:
                self.capacity.pop(link, None)
        self._inputs_seen = None
        self._wake.set()
        self._urgent.set()

    def set_routes(self, routes: dict[str, list[Route]], now: float | None = None) -> dict[str, list[p4r.Update]]:
        """The routes the switches hold (at start, after a re-route). In mode paths, flows whose path
        crossed a link that is gone are placed again at once: returns the pin updates, per switch,
        for the caller to write with the routes (a pin overrides the route)."""
        self.paths.set_routes(routes)
        if self.mode != "paths" or self.schema_of is None:
            return {}
        now = time.monotonic() if now is None else now
        self._place(now, self.collector.snapshot())
        return self.paths.pin_updates(self.schema_of)

    def _write_pins(self, clear: bool = False) -> None:
        if self.schema_of is None:
            return
        updates = self.paths.pin_updates(self.schema_of, clear)
        if updates:
            self.on_writes(updates)

    def flowlet_update(self, schema: P4Schema) -> p4r.Update:
        """flowlet_config for the mode in force: the gap in mode flowlet, else 0 (off)."""
        gap = self.flowlet_gap_us if self.mode == "flowlet" else 0
        return ent.modify(ent.default_entry(schema, "StarIngress.flowlet_config",
                                            ent.action(schema, "StarIngress.set_flowlet_gap", gap_us=gap)))

    def restore(self, schema: P4Schema, switch: str) -> list[p4r.Update]:
        """What a switch programmed afresh gets from the mode: its pins, flowlet switching."""
        return [*self.paths.restore(schema, switch), self.flowlet_update(schema)]

    # ---- the loop -----------------------------------------------------------------------------
    def active_flows(self, now: float, snap: TelemetrySnapshot) -> list[FlowKey]:
        """Host flows INT saw carry data within FLOW_TIMEOUT_S, in ELEPHANT_REPORTS reports or more:
        what mode paths places (Hedera places elephants only; a control connection's few packets
        would take a path's share from a transfer). A flow already placed keeps its place while it
        carried data within PLACED_TIMEOUT_S: a TCP flow waiting out a retransmission timeout is
        not over, and unpinned and pinned again it could come back on another path."""
        placed = self.paths.placed
        return [key for key, flow in snap.flows.items()
                if flow.data_at is not None and key not in self.chatter and (flow.bulk or key in self.transfers)
                and key[0] in self.host_by_ip and key[1] in self.host_by_ip
                and ((now - flow.data_at <= FLOW_TIMEOUT_S and flow.data_reports >= ELEPHANT_REPORTS)
                     or (key in placed and now - flow.data_at <= PLACED_TIMEOUT_S))]

    def _place(self, now: float, snap: TelemetrySnapshot) -> None:
        """Mode paths: the active flows placed, each new one told the links INT saw it take (its
        NIC, then every hop's egress port: ECMP's choice, which it keeps if no other path is better)."""
        flows = self.active_flows(now, snap)
        observed = {key: (nic_link(self.host_by_ip[key[0]]),) + tuple(egress_link(sw, out)
                                                                       for sw, _, out in snap.flows[key].hops)
                    for key in flows if key not in self.paths.placed}
        self.paths.schedule(flows, now, observed)

    def classify(self, now: float, snap: TelemetrySnapshot) -> None:
        """Measured flows into transfers and chatter (the module's docstring): a flow's data rate is
        its sampled rate times the sampling factor — over its open window once that is RATE_WINDOW_S
        old (a flow gone quiet sends no report to close it: its silence counts), else over its last
        closed one; thresholds are shares of its source NIC's rate. A flow younger than one window
        is neither (it is a demand while it carries data, as any new flow)."""
        transfers: set[FlowKey] = set()
        chatter: set[FlowKey] = set()
        for key, flow in snap.flows.items():
            if key[0] not in self.host_by_ip:
                continue
            rate_bps = flow.sampled_bps
            if now - flow.window_at >= RATE_WINDOW_S:
                rate_bps = flow.window_bytes * 8 / (now - flow.window_at)
            if rate_bps is None:
                continue
            nic_bps = self.nic_bps(key[0])
            share = CHATTER_SHARE if key in self.transfers else TRANSFER_SHARE
            (transfers if rate_bps * self.sample_factor >= share * nic_bps else chatter).add(key)
        self.transfers, self.chatter = transfers, chatter

    def demands(self, now: float, snap: TelemetrySnapshot) -> list[Demand]:
        pairs: dict[tuple[str, str], dict] = {}
        for flow_key, flow in snap.flows.items():
            src, dst = flow_key[0], flow_key[1]
            if now - flow.updated > FLOW_TIMEOUT_S or src not in self.host_by_ip or dst not in self.host_by_ip:
                continue
            if flow.data_at is None or now - flow.data_at > FLOW_TIMEOUT_S:
                continue  # only ACKs seen lately: the other direction's transfer, not a demand of its own
            if now - flow.data_at > self.hold_s(flow_key, flow):
                continue  # no data for longer than it would have sent some: a reply, a message, a burst that ended
            if flow_key in self.chatter:
                continue  # data, but at a few kbit/s: a connection's notifications, not a transfer
            if not flow.bulk and flow_key not in self.transfers:
                continue  # small messages only (a barrier, a notification), not measured as a transfer either
            entry = pairs.setdefault((src, dst), {"flows": 0, "links": None})
            entry["flows"] += 1  # kept for the log; shares are per host pair (a control connection is a flow too)
            entry["links"] = (nic_link(self.host_by_ip[src]),) + tuple(egress_link(sw, out) for sw, _, out in flow.hops)
        out = []
        for key in set(pairs) | set(self.declared):
            src, dst = key
            declared = self.declared.get(key)
            links = pairs[key]["links"] if key in pairs else self._edge_links(src, dst)
            placed = self.paths.links_of(src, dst) if self.mode == "paths" else None
            links = placed or links  # mode paths: the paths it gave the pair's flows, before INT shows them
            links = tuple(link for link in links if link in self.capacity)
            weight = declared.weight if declared else 1.0
            out.append(Demand(src, dst, links, weight, declared.cap_bps if declared else None))
        return out

    def nic_bps(self, ip: str) -> float:
        """The capacity of the NIC of the host at `ip` (bit/s)."""
        return self.capacity[nic_link(self.host_by_ip[ip])]

    def unpaced(self, advice: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
        """A pair advised eta_alone of its NIC's rate or more is advised the NIC's rate: only a
        demand alone on its NIC, on a path no slower, gets that much, so its NIC is its bottleneck
        and its host does not pace it (hostagent/pacer.py). A paced destination has 20 ms of buffer on
        its host, and a sender stalled longer idles its link: paced at 0.99 of its NIC, a PyTorch
        all-reduce alone on its paths ran at 0.64-0.79 of mode none beside other work."""
        out = {}
        for (src, dst), rate in advice.items():
            nic_bps = self.nic_bps(src)
            out[(src, dst)] = nic_bps if rate >= self.params.eta_alone * nic_bps * (1 - 1e-9) else rate
        return out

    def hold_s(self, key: FlowKey, flow: FlowPath) -> float:
        """How long after its last data a flow stays a demand: a flow with fewer than ELEPHANT_REPORTS
        data reports, its host's mouse timeout; a transfer, TRANSFER_REPORT_GAPS of the gaps between
        its sampled reports at the rate it was advised (its NIC's if none), at least the mouse timeout and
        at most FLOW_TIMEOUT_S. A transfer that stops sending gives its share back within a fraction
        of a second: held for FLOW_TIMEOUT_S, every burst of a collective's barrier or of its
        verification (Gloo's, between iterations) halved its ring's rates for a second."""
        src = key[0]
        floor = self.mouse_timeout_s[src]
        if flow.data_reports < ELEPHANT_REPORTS:
            return floor
        rate = self.sent.get((src, key[1])) or self.nic_bps(src)
        return min(FLOW_TIMEOUT_S, max(floor, TRANSFER_REPORT_GAPS * self.report_gap_bits / rate))

    def _edge_links(self, src: str, dst: str) -> tuple[LinkId, ...]:
        """The links a pair surely uses whatever ECMP picks: the source NIC and the destination's leaf port."""
        address = self.plan.hosts[self.host_by_ip[dst]]
        return (nic_link(self.host_by_ip[src]), egress_link(address.switch, address.switch_port))

    def link_states(self, now: float, snap: TelemetrySnapshot) -> dict[LinkId, LinkState]:
        states = {}
        for link, capacity in self.capacity.items():
            port = snap.ports.get(link)  # None for a NIC: hosts send no INT of their own
            queue = port.standing_queue_pkts if port is not None and now - port.updated <= FLOW_TIMEOUT_S else 0.0
            states[link] = LinkState(capacity, queue)
        return states

    def step(self, now: float | None = None) -> dict[tuple[str, str], float]:
        """One decision if the inputs changed: returns what was sent."""
        now = time.monotonic() if now is None else now
        if self.mode not in ADVISED:
            return {}
        snap = self.collector.snapshot()
        self.classify(now, snap)
        if self.mode == "paths":
            self._place(now, snap)
            self._write_pins()
        inputs = (snap.version, len(self.declared), tuple(sorted(self.declared)))
        refresh_due = [k for k, t in self.sent_at.items() if now - t > self.valid_ms / 2000]
        if inputs == self._inputs_seen and not refresh_due:
            return {}
        self._inputs_seen = inputs
        self.steps += 1
        demands = self.demands(now, snap)
        advice = self.unpaced(advise(demands, self.link_states(now, snap), self.params) if demands else {})
        to_send = changed(advice, self.sent, self.tolerance)
        gone = {key: 0.0 for key in self.sent if key not in advice}
        refresh = {key: advice[key] for key in refresh_due if key in advice and key not in to_send}
        if to_send or gone:
            self.epoch += 1
        self._send(to_send, "change")
        self._send(gone, "clear")
        self._send(refresh, "refresh")
        for key in gone:
            self.sent.pop(key, None)
            self.sent_at.pop(key, None)
        self.sent.update(to_send)
        return {**to_send, **gone}

    def _send(self, advice: dict[tuple[str, str], float], reason: str) -> None:
        now_wall, now = time.time(), time.monotonic()
        for (src, dst), rate in advice.items():
            host = self.host_by_ip.get(src, "")
            for queue in self.subscribers.get(host, []):
                _put(queue, ("advice", dst, rate))
            self.sent_at[(src, dst)] = now
            self.decisions += 1
            self._writer.writerow([f"{now_wall:.6f}", self.epoch, src, dst, int(rate), reason])
        if advice:
            self._series.flush()  # one write per decision: advice.csv is read while the run goes on

    def _next_refresh_in(self, now: float) -> float:
        """Seconds until the first advice in force needs its refresh (IDLE_WAKE_S if none)."""
        if not self.sent_at:
            return IDLE_WAKE_S
        due = min(self.sent_at.values()) + self.valid_ms / 2000
        return min(IDLE_WAKE_S, max(0.0, due - now))

    async def run(self, stopping: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stopping.is_set():
            started = loop.time()
            self._wake.clear()
            self._urgent.clear()
            try:
                self.step()
            except (KeyError, ValueError) as exc:
                log.warning("advisor: %s", exc)
            except Exception:  # noqa: BLE001 - a defect in one decision must not end advice for the run
                log.exception("advisor: a decision failed (the loop goes on)")
            try:
                await asyncio.wait_for(self._wake.wait(), self._next_refresh_in(time.monotonic()))
            except TimeoutError:
                pass
            rest = self.interval_s - (loop.time() - started)  # at most one decision per interval_s
            if rest > 0 and not self._urgent.is_set():
                try:
                    await asyncio.wait_for(self._urgent.wait(), rest)
                except TimeoutError:
                    pass

    def close(self) -> None:
        self._series.close()


def _check_ip(value: str, field_name: str) -> None:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise AdviceError(f"{field_name}: {value!r} is not an IPv4 address") from None


def _put(queue: asyncio.Queue[T], item: T) -> None:
    try:
        queue.put_nowait(item)
    except asyncio.QueueFull:  # a stuck subscriber loses the oldest update, not the controller
        queue.get_nowait()
        queue.put_nowait(item)
