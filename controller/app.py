"""The controller process: one P4Runtime session per switch, programmed from the topology.

    python -m controller --run-dir runs/<id>

Reads ``topology.yaml`` and ``switches.json`` (name → gRPC address, device id, and for BMv2 the
p4c output: BMv2 JSON and its P4Info) from the run directory, pushes the pipeline, installs
port_role, port_config, int_sink (host-facing ports), int_node, the INT report clone session,
ECMP members/groups (watch ports on every member) and ipv4_lpm routes, then writes
``controller.ready``. A switch whose session drops is reconnected and reprogrammed. Every fabric
link is watched by its ports' carrier (controller/portstatus.py) and probed (controller/links.py); a
link that fails or comes back re-routes the fabric (only the route entries that change are written)
and re-plans the advice, logged in ``links.csv``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from controller.advice import MODES, AdviceLoop
from controller.advisor import AdvisorParams
from controller.faults import LinkLoss, step_work
from controller.links import Change, LinkMonitor, parse_probe, probe_frame
from controller.localizer import Localizer, Suspect
from controller.p4rt_client import SwitchError, SwitchSession
from controller.portstatus import watch_ports
from controller.program import INT_SAMPLE_LOG2, RouteState, route_updates, switch_program
from controller.routing import Route, compute_routes
from controller.service import start_server
from controller.telemetry import Collector, HopLateness
from topologies.addressing import AddressPlan
from topologies.spec import load_topology
from wire import advice_pb2 as pb
from wire import runfiles
from wire.cpu import REASON_INT_REPORT, REASON_PROBE
from wire.fidelity import WINDOW_S, FidelityWindows, watch_loop_lag
from wire.p4info import DEFAULT_P4INFO, P4Schema
from wire.proto import p4r

log = logging.getLogger("controller")

RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class Controller:
    def __init__(self, run_dir: Path, schema: P4Schema, int_sample_log2: int | None = INT_SAMPLE_LOG2,
                 mode: str = "none", interval_s: float = 0.001, eta: float = 0.95, drain_s: float = 0.1,
                 fidelity_file: Path | None = None, probe_s: float = 0.050, probe_misses: int = 4,
                 hold_down_s: float = 0.5) -> None:
        """int_sample_log2: INT starts on 1 in 2^N packets of each host flow (None = no INT);
        mode: none | ecn | advice | bbr; interval_s: advice loop period; eta: target utilisation;
        fidelity_file: where BMv2 switches' lateness (from INT) goes (None = not measured);
        probe_s, probe_misses, hold_down_s: link probes (controller/links.py; probe_s 0 = none)."""
        self.int_sample_log2 = int_sample_log2
        self.run_dir = run_dir
        self.schema = schema
        self.topo = load_topology(run_dir / runfiles.TOPOLOGY)
        self.plan = AddressPlan(self.topo)
        info = json.loads((run_dir / runfiles.SWITCHES).read_text())
        self.switch_info = info["switches"]
        self.schemas: dict[str, P4Schema] = {}
        self.sessions: dict[str, SwitchSession] = {}
        self.stopping = asyncio.Event()
        self.packet_ins = 0
        self.collector = Collector({self.plan.switches[s.name].device_id: s.name for s in self.topo.switches},
                                   series=run_dir / runfiles.TELEMETRY, lateness=self._hop_lateness(fidelity_file),
                                   flow_log=run_dir / runfiles.INT_FLOWS)
        self.advice = AdviceLoop(self.topo, self.plan, self.collector, run_dir, mode,
                                 AdvisorParams(eta=eta, drain_s=drain_s, queue_allowance_pkts=2), interval_s)
        self.loop_lag: FidelityWindows | None = None  # set by main(): event-loop lag into fidelity.csv
        self.probe_s, self.probe_misses, self.hold_down_s = probe_s, probe_misses, hold_down_s
        self.monitor: LinkMonitor | None = None
        self.down: set[frozenset[str]] = set()  # failed links (controller/routing.py's form)
        self.route_state: dict[str, RouteState] = {}
        self._reroute_lock = asyncio.Lock()
        self.loss = LinkLoss(self.topo)
        self.localizer = Localizer(self.topo)
        self.localized_at = 0.0
        self.diagnosis_log = (run_dir / runfiles.DIAGNOSIS).open("a")
        if self.diagnosis_log.tell() == 0:
            self.diagnosis_log.write("time,target,fault,score,evidence\n")
        self._pending: set[asyncio.Task] = set()  # re-routes started by port events
        self.device_names = {self.plan.switches[s.name].device_id: s.name for s in self.topo.switches}
        self.timeline = (run_dir / runfiles.LINKS).open("a")
        if self.timeline.tell() == 0:
            self.timeline.write("time,link,state,detected_wall,routes_written_ms,route_updates,advice_decided_ms\n")

    def _hop_lateness(self, fidelity_file: Path | None) -> HopLateness | None:
        """BMv2 switches have no timing monitor of their own: the controller measures them from INT."""
        bmv2 = [name for name, info in self.switch_info.items() if info.get("kind") == "bmv2"]
        if fidelity_file is None or not bmv2:
            return None
        return HopLateness({name: FidelityWindows(fidelity_file, name, "switch") for name in bmv2})

    def _schema(self, name: str) -> P4Schema:
        """The P4Info this switch runs: p4c's output for BMv2, else the committed one."""
        path = self.switch_info[name].get("p4info")
        if not path:
            return self.schema
        if path not in self.schemas:
            self.schemas[path] = P4Schema.load(path)
        return self.schemas[path]

    def _session(self, name: str) -> SwitchSession:
        sw = self.switch_info[name]
        return SwitchSession(name, sw["grpc"], sw["device_id"], self._schema(name),
                             request_log=self.run_dir / runfiles.P4RUNTIME_LOG)

    async def program(self, session: SwitchSession, routes: list[Route]) -> int:
        device_config = self.switch_info[session.name].get("device_config")
        await session.set_pipeline(Path(device_config).read_bytes() if device_config else b"")
        self.route_state[session.name] = state = RouteState()
        updates = switch_program(session.schema, self.topo, self.plan, session.name, routes, self.int_sample_log2,
                                 state)
        updates += self.loss.restore(session.schema, session.name)
        await session.write(updates)
        return len(updates)

    async def start(self) -> None:
        routes = self._routes(self.down)
        names = [s.name for s in self.topo.switches]
        for name in names:
            self.sessions[name] = self._session(name)
        await asyncio.gather(*(self.sessions[n].connect() for n in names))
        counts = await asyncio.gather(*(self.program(self.sessions[n], routes[n]) for n in names))
        for name, count in zip(names, counts, strict=True):
            log.info("%s programmed: %d updates", name, count)
        (self.run_dir / runfiles.CONTROLLER_READY).write_text(json.dumps(dict(zip(names, counts, strict=True))))

    def _packet_in_handlers(self) -> dict[int, Callable[[str, p4r.PacketIn], object]]:
        """PacketIn dispatch by packet_in.reason (wire/cpu.py): one table, one place to add a reason."""
        return {REASON_INT_REPORT: lambda name, packet: self.collector.feed(packet.payload),
                REASON_PROBE: self._on_probe}

    def _on_probe(self, name: str, packet: p4r.PacketIn) -> None:
        probe = parse_probe(packet.payload, self.device_names)
        if probe is None or self.monitor is None:
            log.debug("%s: a probe that is not ours", name)
            return
        port = self.sessions[name].packet_in_fields(packet).get("ingress_port", 0)
        self.monitor.received(probe[0], (name, port), probe[1])

    async def _probe(self, monitor: LinkMonitor) -> None:
        """Every probe_s a probe out of every fabric port; the monitor's changes re-route the fabric."""
        loop = asyncio.get_running_loop()
        ends = monitor.ends()
        while not self.stopping.is_set():
            sent = loop.time()  # the probe carries it: a late one still tells when the link carried it
            for switch, port in ends:
                session = self.sessions[switch]
                if session.is_primary.is_set():
                    await session.packet_out(probe_frame(self.plan, switch, port, sent), port)
            await asyncio.sleep(self.probe_s)
            changes = monitor.tick(loop.time())
            if changes:
                await self._reroute(changes)

    async def set_link_loss(self, sender: str, receiver: str, percent: float) -> float:
        """Frame loss on the link sender → receiver (controller/faults.py); the loss as installed."""
        self.loss.where(sender, receiver)  # FaultError naming the field before anything is looked up
        before = dict(self.loss.steps)
        installed, updates = self.loss.set(self.sessions[receiver].schema, sender, receiver, percent)
        try:
            await self.sessions[receiver].write(updates)
        except SwitchError:
            self.loss.steps = before
            raise
        log.warning("link %s -> %s: %.2f%% of frames lost (injected)", sender, receiver, installed)
        return installed

    def diagnosis(self) -> tuple[list[Suspect], list[tuple[float, Suspect]], float]:
        return self.localizer.ranked(), list(self.localizer.alerts), self.localized_at

    def report_steps(self, report: pb.StepReport) -> int:
        """A rank's step timings into the localiser; the hosts it holds timings of."""
        return self.localizer.add_steps(time.time(), *step_work(report, self.advice.host_by_ip))

    async def _counters(self) -> dict[tuple[str, int], tuple[int, int, int]]:
        """Every fabric port's (rx packets, tx packets, tx bytes), read over P4Runtime: one Read per
        switch for just those cells."""
        ports: dict[str, list[int]] = {}
        for sender, _receiver, _ in self.localizer.directions:
            ports.setdefault(sender[0], []).append(sender[1])
        names = [n for n in ports if self.sessions[n].is_primary.is_set()]
        results = await asyncio.gather(*(self.sessions[n].read_counter_cells(
            [(c, p) for p in ports[n] for c in ("StarIngress.port_rx", "StarEgress.port_tx")]) for n in names),
            return_exceptions=True)
        counters = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("localiser: %s's counters unread: %s", name, result)
                continue
            for port in ports[name]:
                rx = result.get(("StarIngress.port_rx", port), (0, 0))
                tx = result.get(("StarEgress.port_tx", port), (0, 0))
                counters[(name, port)] = (rx[0], tx[0], tx[1])
        return counters

    async def _localize(self, period_s: float = 1.0) -> None:
        """Every second: counters, link states and INT into the localiser; its alerts into the log
        and diagnosis.csv."""
        while not self.stopping.is_set():
            await asyncio.sleep(period_s)
            try:
                counters = await self._counters()
                alerts = len(self.localizer.alerts)
                wall = time.time()
                self.localizer.update(wall, counters, set(self.down), self.collector.take_latency_lows(),
                                      self.collector.take_drain_rates())
                self.localized_at = wall
                for at, s in self.localizer.alerts[alerts:]:
                    log.warning("localiser: %s (%s, score %.2f): %s", s.target, s.fault, s.score, s.evidence)
                    self.diagnosis_log.write(f"{at:.3f},{s.target},{s.fault},{s.score:.3f},\"{s.evidence}\"\n")
                self.diagnosis_log.flush()
            except Exception:  # noqa: BLE001 - a bug in one tick must not end localisation; it is logged in full
                log.exception("localiser: tick failed")

    async def _watch_carriers(self, monitor: LinkMonitor) -> None:
        """Fabric ports' carrier (netlink): a lost one re-routes at once, before any probe is missed."""
        ports = {iface: (name, int(port)) for name, info in self.switch_info.items()
                 for port, iface in info.get("ports", {}).items()}
        loop = asyncio.get_running_loop()

        def changed(end: tuple[str, int], up: bool) -> None:
            changes = monitor.port_status(end, up, loop.time())
            if changes:
                task = loop.create_task(self._reroute(changes))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

        try:
            await watch_ports(ports, changed, self.stopping)
        except OSError as exc:  # no netlink here: probes alone find failures
            log.error("port status unavailable (%s): link failures are found by probes only", exc)
        except Exception:  # noqa: BLE001 - logged in full; probes still find failures
            log.exception("port status watch failed: link failures are found by probes only")

    def _routes(self, down: set[frozenset[str]]) -> dict[str, list[Route]]:
        """Routes over the links that are up; a destination a switch could reach only over links
        declared down keeps its full route: probes can be lost on a busy machine, and withdrawing
        the last path would drop what a live link still carries (a real partition drops it anyway)."""
        routes = compute_routes(self.topo, self.plan, down)
        if not down:
            return routes
        full = compute_routes(self.topo, self.plan)
        for name, kept in routes.items():
            reachable = {r.prefix for r in kept}
            kept.extend(r for r in full[name] if r.prefix not in reachable)
        return routes

    async def _reroute(self, changes: list[Change]) -> None:
        """Routes for the links that are up, written as changes only; the advice re-planned for
        the capacity that is left; one timeline row per changed link (links.csv). One at a time:
        each writes the difference from the routes its predecessor left."""
        detected = time.time()
        async with self._reroute_lock:
            await self._reroute_locked(changes, detected)

    async def _reroute_locked(self, changes: list[Change], detected: float) -> None:
        assert self.monitor is not None
        self.down = self.monitor.down()
        routes = self._routes(self.down)
        writes = {name: route_updates(self.sessions[name].schema, routes[name], self.route_state[name])
                  for name in self.sessions if name in self.route_state}
        results = await asyncio.gather(*(self.sessions[n].write(u) for n, u in writes.items() if u),
                                       return_exceptions=True)
        for error in results:
            if isinstance(error, BaseException):
                log.error("re-route: a write failed: %s", error)
        written = time.time()
        steps = self.advice.steps
        for change in changes:
            self.advice.set_links(list(change.ends), change.up)
        decided = None
        if self.advice.mode == "advice":
            deadline = time.monotonic() + 1.0
            while self.advice.steps == steps and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            decided = time.time() if self.advice.steps != steps else None
        count = sum(len(u) for u in writes.values())
        for change in changes:
            link = "-".join(sorted(change.link))
            state = "up" if change.up else "down"
            log.warning("link %s %s: detected, %d route updates written in %.1f ms", link, state, count,
                        (written - detected) * 1e3)
            self.timeline.write(f"{time.time():.6f},{link},{state},{detected:.6f},{(written - detected) * 1e3:.2f},"
                                f"{count},{'' if decided is None else f'{(decided - detected) * 1e3:.2f}'}\n")
        self.timeline.flush()

    async def _watch(self, name: str) -> None:
        """Dispatch the switch's PacketIns; when its session is lost, reconnect and reprogram."""
        handlers = self._packet_in_handlers()
        while not self.stopping.is_set():
            session = self.sessions[name]
            try:
                packet = session.packet_ins.get_nowait()
            except asyncio.QueueEmpty:
                # asyncio.timeout, not wait_for: wait_for wraps every get in a task of its own,
                # which at ~1,000 packet-ins a second was a good part of the controller's CPU.
                try:
                    async with asyncio.timeout(0.5):
                        packet = await session.packet_ins.get()
                except TimeoutError:
                    if not session.is_primary.is_set():
                        await self._reconnect(name)
                    continue
            self.packet_ins += 1
            reason = session.packet_in_fields(packet).get("reason", 0)
            handler = handlers.get(reason)
            if handler is None:
                log.debug("%s: packet-in with reason %d ignored", name, reason)
                continue
            try:
                handler(name, packet)
            except Exception:  # noqa: BLE001 - one bad packet-in must not end the switch's watcher
                log.exception("%s: packet-in (reason %d) handler failed", name, reason)

    async def _reconnect(self, name: str) -> None:
        """A fresh session, the pipeline pushed and the switch reprogrammed; retried with backoff
        until it works or the controller stops. Expected failures are logged in a line, anything
        else with its traceback."""
        log.warning("%s: session lost, reconnecting", name)
        await self.sessions[name].close()
        for attempt in itertools.count():
            if self.stopping.is_set():
                return
            fresh = self._session(name)
            self.sessions[name] = fresh
            try:
                await fresh.connect(timeout_s=2.0)
                await self.program(fresh, self._routes(self.down)[name])
                log.info("%s: reconnected and reprogrammed", name)
                return
            except (SwitchError, grpc.aio.AioRpcError, OSError) as exc:
                log.warning("%s: reconnect attempt %d failed: %s", name, attempt + 1, exc)
            except Exception:  # noqa: BLE001 - a bug here must not end the watcher either; it is logged in full
                log.exception("%s: reconnect attempt %d failed", name, attempt + 1)
            await fresh.close()
            await asyncio.sleep(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])

    async def _age_telemetry(self) -> None:
        ticks = 0
        while not self.stopping.is_set():
            await asyncio.sleep(WINDOW_S)
            if self.collector.lateness is not None:
                self.collector.lateness.tick(time.time())
            ticks += 1
            if ticks % 10 == 0:
                self.collector.expire()
                self.collector.flush()

    async def run(self) -> None:
        server = await start_server(self.run_dir, self.collector, self.advice, self)
        await self.start()
        watchers = [asyncio.create_task(self._watch(n)) for n in self.sessions]
        watchers.append(asyncio.create_task(self._age_telemetry()))
        watchers.append(asyncio.create_task(self.advice.run(self.stopping)))
        if self.probe_s > 0:
            self.monitor = LinkMonitor(self.topo, asyncio.get_running_loop().time(), self.probe_s,
                                       self.probe_misses, self.hold_down_s)
            watchers.append(asyncio.create_task(self._probe(self.monitor)))
            watchers.append(asyncio.create_task(self._watch_carriers(self.monitor)))
        watchers.append(asyncio.create_task(self._localize()))
        if self.loop_lag is not None:
            watchers.append(asyncio.create_task(watch_loop_lag(self.loop_lag, self.stopping)))
        await self.stopping.wait()
        watchers += self._pending
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.sessions.values()), return_exceptions=True)
        await server.stop(0.5)
        self.collector.close()
        self.advice.close()
        self.timeline.close()
        self.diagnosis_log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="controller", description="StarNet P4Runtime controller")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--int-sample-log2", type=int, default=INT_SAMPLE_LOG2, choices=range(-1, 17),
                        metavar="N", help="INT on 1 in 2^N packets of each host flow (0..16; -1 = INT off)")
    parser.add_argument("--mode", default="none", choices=MODES, help="control mode at start")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="advice loop period (ms)")
    parser.add_argument("--eta", type=float, default=0.95, help="target utilisation of every link")
    parser.add_argument("--drain-ms", type=float, default=100.0, help="horizon to drain a standing queue (ms)")
    parser.add_argument("--probe-ms", type=float, default=50.0,
                        help="link probe period on every fabric port (ms; 0 = no probes, no failure detection)")
    parser.add_argument("--probe-misses", type=int, default=4, help="probe periods without one: the link is down")
    parser.add_argument("--hold-down-ms", type=float, default=500.0,
                        help="a failed link returns to service after probes crossed it this long without a miss")
    parser.add_argument("--fidelity-file", type=Path,
                        help="append event-loop lag and BMv2 switches' lateness (from INT) per 100 ms window here")
    args = parser.parse_args(argv)
    logging.basicConfig(filename=args.run_dir / runfiles.CONTROLLER_LOG, level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sample = None if args.int_sample_log2 < 0 else args.int_sample_log2
    if args.probe_ms < 0 or args.probe_misses < 1 or args.hold_down_ms < 0:
        parser.error("--probe-ms and --hold-down-ms must be >= 0, --probe-misses >= 1")
    controller = Controller(args.run_dir, P4Schema.load(args.p4info), sample, args.mode, args.interval_ms / 1000,
                            args.eta, args.drain_ms / 1000, args.fidelity_file, args.probe_ms / 1000,
                            args.probe_misses, args.hold_down_ms / 1000)
    if args.fidelity_file:
        controller.loop_lag = FidelityWindows(args.fidelity_file, "controller", "loop")

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, controller.stopping.set)
        await controller.run()

    try:
        asyncio.run(runner())
    except SwitchError as exc:
        log.error("%s", exc)
        print(f"controller: {exc}", file=sys.stderr)
        return 1
    return 0
