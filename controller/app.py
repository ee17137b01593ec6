"""The controller process, made of parts with one job each:

    python -m controller --run-dir runs/<id>

- sessions.py (`Switches`): one P4Runtime session per switch — connect, push the pipeline, install
  port_role, port_config, int_sink (host-facing ports), int_node, the INT report clone session, ECMP
  members/groups (watch ports on every member) and ipv4_lpm routes; packet-in dispatch by reason;
  reconnect and reprogram a switch whose session dropped;
- telemetry.py (`Collector`) and advice.py (`AdviceLoop`): INT into per-port state, and the advice;
  paths.py (`PathScheduler`, mode paths): flows placed on paths, pinned (flow_pin; paths.csv);
- healing.py (`Healer`): probes and carriers find failed links; re-route, re-plan, links.csv;
- diagnosis.py (`Diagnoser`): the localiser and diagnosis.csv;
- service.py: the advice API on the run directory's Unix socket; faults.py: injected loss;
- front.py: the web front, a process of its own serving metrics.py's Prometheus `/metrics` and
  live.py's live page (a map of the fabric, pushed by Server-Sent Events) on 127.0.0.1 (their
  addresses in the run directory's metrics.addr and live.addr), from copies of the parts' state
  (`fabric_state`) taken on the event loop when it asks.

Reads ``topology.yaml`` and ``switches.json`` (name → gRPC address, device id, and for BMv2 the p4c
output: BMv2 JSON and its P4Info) from the run directory and writes ``controller.ready`` once
every switch is programmed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import signal
import sys
import time
from pathlib import Path

from controller.advice import AdviceLoop
from controller.advisor import AdvisorParams
from controller.diagnosis import Diagnoser
from controller.faults import LinkLoss
from controller.front import Front, FrontError
from controller.healing import Healer
from controller.localizer import Suspect
from controller.metrics import FabricState, on_loop
from controller.options import ControllerOptions
from controller.p4rt_client import SwitchError, SwitchSession
from controller.paths import FLOW_PIN, PATHS_HEADER, pin_row
from controller.service import start_server
from controller.sessions import Switches
from controller.telemetry import Collector, HopLateness
from topologies.addressing import AddressPlan
from topologies.spec import load_topology
from wire import advice_pb2 as pb
from wire import runfiles
from wire.cpu import REASON_INT_REPORT, REASON_PROBE
from wire.fidelity import WINDOW_S, FidelityWindows, wall_offset, watch_loop_lag
from wire.p4info import DEFAULT_P4INFO, P4Schema
from wire.proto import p4r

log = logging.getLogger("controller")


class Controller:
    def __init__(self, run_dir: Path, schema: P4Schema, options: ControllerOptions | None = None) -> None:
        self.run_dir = run_dir
        self.options = options = options or ControllerOptions()
        self.topo = load_topology(run_dir / runfiles.TOPOLOGY)
        self.plan = AddressPlan(self.topo)
        self.stopping = asyncio.Event()
        self.switches = Switches(run_dir, self.topo, self.plan, schema, options.int_sample_log2, self.stopping,
                                 int_dscp=options.int_dscp)
        self.collector = Collector({self.plan.switches[s.name].device_id: s.name for s in self.topo.switches},
                                   series=run_dir / runfiles.TELEMETRY, lateness=self._hop_lateness(),
                                   flow_log=run_dir / runfiles.INT_FLOWS)
        self.advice = AdviceLoop(self.topo, self.plan, self.collector, run_dir, options.mode,
                                 AdvisorParams(eta=options.eta, drain_s=options.drain_s, queue_allowance_pkts=2),
                                 options.interval_s, flowlet_gap_us=options.flowlet_gap_us,
                                 int_sample_log2=options.int_sample_log2)
        self.healer = Healer(run_dir, self.topo, self.plan, self.switches, self.advice, options)
        self.diagnoser = Diagnoser(run_dir, self.topo, self.switches, self.collector, self.advice.host_by_ip,
                                   lambda: self.healer.down)
        self.loss = LinkLoss(self.topo)
        self.loop_lag = FidelityWindows(options.fidelity_file, "controller", "loop") if options.fidelity_file else None
        self.front: Front | None = None  # the web front (/metrics, the live page), started by run()
        self.wall = wall_offset()  # taken once: a port's wall time stays the same from one copy to the next
        self.switches.routes_for = lambda name: self.healer.routes()[name]
        self.switches.soft_device_config = self.healer.soft_device_config
        self.switches.restore = lambda schema, name: self.loss.restore(schema, name) + self.advice.restore(schema, name)
        self.advice.schema_of = self.switches.schema_of
        self.mode_writes: asyncio.Queue[dict[str, list[p4r.Update]]] = asyncio.Queue()
        self.advice.on_writes = self.mode_writes.put_nowait
        self.pin_log = (run_dir / runfiles.PATHS).open("a")
        if self.pin_log.tell() == 0:
            self.pin_log.write(PATHS_HEADER)
        self.switches.handlers = {REASON_INT_REPORT: lambda name, packet: self.collector.feed(packet.payload),
                                  REASON_PROBE: self.healer.on_probe}

    def fabric_state(self, histograms: bool = True) -> FabricState:
        """A copy of what the parts hold, for /metrics (controller/metrics.py) and the live page
        (controller/live.py, which draws no histograms: `histograms` False); on the event loop."""
        peer = self.diagnoser.localizer.peer  # (switch, port) → the node at its other end
        snap = self.collector.snapshot()
        ports = {(v.switch, v.port, peer.get((v.switch, v.port), "")):
                 (float(v.queue_pkts), v.utilisation or 0.0, v.hop_latency_us / 1e6, v.capacity_mbps * 1e6)
                 for v in snap.ports.values()}
        seen = {(v.switch, v.port, peer.get((v.switch, v.port), "")): v.updated + self.wall  # collector: monotonic
                for v in snap.ports.values()}
        counters = {(sw, port, peer.get((sw, port), "")): values
                    for (sw, port), values in self.diagnoser.last_counters.items()}
        down = self.healer.down
        links = {(link.a, link.b): frozenset((link.a, link.b)) not in down for link in self.topo.links}
        host = self.advice.host_by_ip
        advice = {(host.get(src, src), host.get(dst, dst)): rate for (src, dst), rate in self.advice.sent.items()}
        probes = {}
        if self.healer.monitor is not None:
            now = asyncio.get_running_loop().time()  # the probes' clock
            for state in self.healer.monitor.links.values():
                for origin, other in ((state.a, state.b), (state.b, state.a)):
                    probes[(*origin, other[0])] = (state.probes.get(origin, 0), max(0.0, now - state.last_seen[origin]))
        return FabricState(ports=ports, counters=counters, links=links, advice=advice,
                           suspects=self.diagnoser.localizer.ranked(),
                           drops={k: dict(v) for k, v in self.diagnoser.last_drops.items()}, probes=probes,
                           int_reports=snap.reports, int_bad_reports=snap.bad_reports,
                           latency={(sw, port, peer.get((sw, port), "")): h
                                    for (sw, port), h in self.collector.latency_histograms().items()}
                           if histograms else {}, seen=seen)

    @property
    def sessions(self) -> dict[str, SwitchSession]:
        return self.switches.sessions

    def _hop_lateness(self) -> HopLateness | None:
        """BMv2 switches have no timing monitor of their own: the controller measures them from INT."""
        bmv2 = [name for name, info in self.switches.info.items() if info.get("kind") == "bmv2"]
        if self.options.fidelity_file is None or not bmv2:
            return None
        return HopLateness({name: FidelityWindows(self.options.fidelity_file, name, "switch") for name in bmv2})

    async def start(self) -> None:
        routes = self.healer.routes()
        counts = await self.switches.start(routes)
        self.advice.set_routes(routes)  # no flows yet: no pins
        if self.front is not None:  # started beside the switches' programming; its addresses before ready
            served = await asyncio.to_thread(self.front.wait_ready)  # the loop runs on: the front's asks need it
            for name, port in ((runfiles.METRICS_ADDR, served.get("metrics_port")),
                               (runfiles.LIVE_ADDR, served.get("web_port"))):
                if port is not None:
                    (self.run_dir / name).write_text(f"127.0.0.1:{port}\n")
        (self.run_dir / runfiles.CONTROLLER_READY).write_text(json.dumps(counts))

    # ---- the API's fault channel (controller/service.py's Faults) -------------------------------------------
    async def set_link_loss(self, sender: str, receiver: str, percent: float) -> float:
        """Frame loss on the link sender → receiver (controller/faults.py); the loss as installed."""
        self.loss.where(sender, receiver)  # FaultError naming the field before anything is looked up
        before = dict(self.loss.steps)
        session = self.sessions[receiver]
        installed, updates = self.loss.set(session.schema, sender, receiver, percent)
        try:
            await session.write(updates)
        except SwitchError:
            self.loss.steps = before
            raise
        log.warning("link %s -> %s: %.2f%% of frames lost (injected)", sender, receiver, installed)
        return installed

    def diagnosis(self) -> tuple[list[Suspect], list[tuple[float, Suspect]], float]:
        return self.diagnoser.diagnosis()

    def report_steps(self, report: pb.StepReport) -> int:
        return self.diagnoser.report_steps(report)

    async def _write_mode_updates(self) -> None:
        """The modes' writes (flow_pin, flowlet_config), batch by batch in the order decided (each
        batch: its switches at once); one paths.csv row per flow_pin update written."""
        while True:
            updates = await self.mode_writes.get()
            names = [n for n in updates if n in self.sessions]
            results = await asyncio.gather(*(self.sessions[n].write(updates[n]) for n in names),
                                           return_exceptions=True)
            wall = time.time()
            for name, result in zip(names, results, strict=True):
                if isinstance(result, BaseException):
                    log.error("%s: the mode's write failed: %s", name, result)
                    continue
                schema = self.sessions[name].schema
                pin_table = schema.id_of(FLOW_PIN)
                for update in updates[name]:
                    if update.entity.table_entry.table_id == pin_table:
                        self.pin_log.write(pin_row(wall, name, schema, update))
            self.pin_log.flush()

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
        server, socket_dir = await start_server(self.run_dir, self.collector, self.advice, self,
                                                self.options.api_socket)
        if self.options.metrics_port is not None or self.options.web_port is not None:
            loop = asyncio.get_running_loop()
            self.front = Front(self.run_dir, lambda histograms: on_loop(loop, lambda: self.fabric_state(histograms))(),
                               self.options.metrics_port, self.options.web_port, self.options.fidelity_file).launch()
        try:
            await self.start()
        except BaseException:
            if self.front is not None:
                self.front.stop()
            raise
        tasks = [asyncio.create_task(self.switches.watch(n)) for n in self.sessions]
        tasks.append(asyncio.create_task(self._age_telemetry()))
        tasks.append(asyncio.create_task(self._write_mode_updates()))
        tasks.append(asyncio.create_task(self.advice.run(self.stopping)))
        tasks += self.healer.tasks()
        tasks.append(asyncio.create_task(self.diagnoser.run()))
        if self.loop_lag is not None:
            tasks.append(asyncio.create_task(watch_loop_lag(self.loop_lag, self.stopping)))
        for task in tasks:
            task.add_done_callback(_log_death)
        await self.stopping.wait()
        tasks += self.healer.pending()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.switches.close()
        await server.stop(0.5)
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
        if self.front is not None:
            self.front.stop()
        self.collector.close()
        self.advice.close()
        self.healer.close()
        self.diagnoser.close()
        self.pin_log.close()


def _log_death(task: asyncio.Task) -> None:
    """A task of the controller that ended by an exception says so in the log (the gather at the
    stop would otherwise swallow it, and the part it ran would stop without a word)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s ended: %r", task.get_coro() or task.get_name(), task.exception(),
                  exc_info=task.exception())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="controller", description="StarNet P4Runtime controller")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO)
    parser.add_argument("--log-level", default="INFO")
    ControllerOptions.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(filename=args.run_dir / runfiles.CONTROLLER_LOG, level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        options = ControllerOptions.from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    controller = Controller(args.run_dir, P4Schema.load(args.p4info), options)

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, controller.stopping.set)
        await controller.run()

    try:
        asyncio.run(runner())
    except (SwitchError, FrontError) as exc:
        log.error("%s", exc)
        print(f"controller: {exc}", file=sys.stderr)
        return 1
    return 0
