"""The controller process: one P4Runtime session per switch, programmed from the topology.

    python -m controller --run-dir runs/<id>

Reads ``topology.yaml`` and ``switches.json`` (name → gRPC address, device id, and for BMv2 the
p4c output: BMv2 JSON and its P4Info) from the run directory, pushes the pipeline, installs
port_role, port_config, int_sink (host-facing ports), int_node, the INT report clone session,
ECMP members/groups (watch ports on every member) and ipv4_lpm routes, then writes
``controller.ready``. A switch whose session drops is reconnected and reprogrammed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from controller import entities as ent
from controller.advice import MODES, AdviceLoop
from controller.advisor import AdvisorParams
from controller.p4rt_client import SwitchError, SwitchSession
from controller.routing import compute_routes, port_configs
from controller.service import start_server
from controller.telemetry import Collector
from topologies.addressing import AddressPlan
from topologies.spec import Topology, load_topology
from wire.cpu import CPU_PORT, REASON_INT_REPORT, REPORT_SESSION, ROLE_HOST
from wire.fidelity import FidelityWindows, watch_loop_lag
from wire.p4info import DEFAULT_P4INFO, P4Schema
from wire.proto import p4r

log = logging.getLogger("controller")

SELECTOR = "StarIngress.ecmp_selector"
INT_SAMPLE_LOG2 = 3  # default: INT on 1 in 8 packets of every host TCP/UDP flow


def switch_program(schema: P4Schema, topo: Topology, plan: AddressPlan, switch: str,
                   routes, int_sample_log2: int | None = INT_SAMPLE_LOG2) -> list[p4r.Update]:
    """All updates that program `switch` from scratch, in dependency order."""
    updates: list[p4r.Update] = [
        ent.modify(ent.default_entry(schema, "StarEgress.int_node",
                                     ent.action(schema, "StarEgress.set_node_id", id=plan.switches[switch].device_id))),
        ent.insert(ent.clone_session(REPORT_SESSION, CPU_PORT)),  # starnet.p4 truncates the reports
    ]
    for proto in (6, 17) if int_sample_log2 is not None else ():
        updates.append(ent.insert(ent.table_entry(
            schema, "StarIngress.int_source", {"hdr.ipv4.protocol": (proto, 0xFF)},
            action_call=ent.action(schema, "StarIngress.int_watch", sample_log2=int_sample_log2), priority=1)))
    for pc in port_configs(topo, switch):
        if pc.role == ROLE_HOST:
            updates.append(ent.insert(ent.table_entry(
                schema, "StarIngress.int_sink", {"standard_metadata.egress_spec": pc.port},
                action_call=ent.action(schema, "StarIngress.set_int_sink"))))
        updates.append(ent.insert(ent.table_entry(
            schema, "StarIngress.port_role", {"standard_metadata.ingress_port": pc.port},
            action_call=ent.action(schema, "StarIngress.set_port_role", role=pc.role))))
        updates.append(ent.insert(ent.table_entry(
            schema, "StarEgress.port_config", {"standard_metadata.egress_port": pc.port},
            action_call=ent.action(schema, "StarEgress.set_port_config",
                                   capacity_mbps=int(round(pc.capacity_mbps)),
                                   ecn_threshold_pkts=pc.ecn_threshold_pkts))))
    members: dict[tuple, int] = {}
    groups: dict[tuple, int] = {}
    tail: list[p4r.Update] = []
    for route in routes:
        for hop in route.next_hops:
            if hop not in members:
                members[hop] = len(members) + 1
                updates.append(ent.insert(ent.member(
                    schema, SELECTOR, members[hop],
                    ent.action(schema, "StarIngress.set_nhop", port=hop.port, smac=hop.smac, dmac=hop.dmac))))
        match = {"hdr.ipv4.dst_addr": (route.prefix, route.prefix_len)}
        if len(route.next_hops) == 1:
            tail.append(ent.insert(ent.table_entry(schema, "StarIngress.ipv4_lpm", match,
                                                   member_id=members[route.next_hops[0]])))
            continue
        if route.next_hops not in groups:
            groups[route.next_hops] = len(groups) + 1
            updates.append(ent.insert(ent.group(
                schema, SELECTOR, groups[route.next_hops],
                [(members[h], h.port) for h in route.next_hops])))
        tail.append(ent.insert(ent.table_entry(schema, "StarIngress.ipv4_lpm", match,
                                               group_id=groups[route.next_hops])))
    return updates + tail


class Controller:
    def __init__(self, run_dir: Path, schema: P4Schema, int_sample_log2: int | None = INT_SAMPLE_LOG2,
                 mode: str = "none", interval_s: float = 0.001, eta: float = 0.95, drain_s: float = 0.1) -> None:
        """int_sample_log2: INT starts on 1 in 2^N packets of each host flow (None = no INT);
        mode: none | ecn | advice; interval_s: advice loop period; eta: target utilisation."""
        self.int_sample_log2 = int_sample_log2
        self.run_dir = run_dir
        self.schema = schema
        self.topo = load_topology(run_dir / "topology.yaml")
        self.plan = AddressPlan(self.topo)
        info = json.loads((run_dir / "switches.json").read_text())
        self.switch_info = info["switches"]
        self.schemas: dict[str, P4Schema] = {}
        self.sessions: dict[str, SwitchSession] = {}
        self.stopping = asyncio.Event()
        self.packet_ins = 0
        self.collector = Collector({self.plan.switches[s.name].device_id: s.name for s in self.topo.switches},
                                   series=run_dir / "telemetry.csv")
        self.advice = AdviceLoop(self.topo, self.plan, self.collector, run_dir, mode,
                                 AdvisorParams(eta=eta, drain_s=drain_s, queue_allowance_pkts=2), interval_s)
        self.loop_lag: FidelityWindows | None = None  # set by main(): event-loop lag into fidelity.csv

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
                             request_log=self.run_dir / "p4runtime-requests.log")

    async def program(self, session: SwitchSession, routes) -> int:
        device_config = self.switch_info[session.name].get("device_config")
        await session.set_pipeline(Path(device_config).read_bytes() if device_config else b"")
        updates = switch_program(session.schema, self.topo, self.plan, session.name, routes, self.int_sample_log2)
        await session.write(updates)
        return len(updates)

    async def start(self) -> None:
        routes = compute_routes(self.topo, self.plan)
        names = [s.name for s in self.topo.switches]
        for name in names:
            self.sessions[name] = self._session(name)
        await asyncio.gather(*(self.sessions[n].connect() for n in names))
        counts = await asyncio.gather(*(self.program(self.sessions[n], routes[n]) for n in names))
        for name, count in zip(names, counts, strict=True):
            log.info("%s programmed: %d updates", name, count)
        (self.run_dir / "controller.ready").write_text(json.dumps(dict(zip(names, counts, strict=True))))

    async def _watch(self, name: str) -> None:
        """Drain PacketIns; reconnect and reprogram the switch if its session drops."""
        while not self.stopping.is_set():
            session = self.sessions[name]
            try:
                packet = await asyncio.wait_for(session.packet_ins.get(), 0.5)
                self.packet_ins += 1
                fields = session.packet_in_fields(packet)
                if fields.get("reason") == REASON_INT_REPORT:
                    self.collector.feed(packet.payload)
                else:
                    log.debug("%s packet-in %s", name, fields)
                continue
            except asyncio.TimeoutError:
                pass
            if session.is_primary.is_set():
                continue
            log.warning("%s: session lost, reconnecting", name)
            await session.close()
            fresh = self._session(name)
            try:
                await fresh.connect(timeout_s=2.0)
                await self.program(fresh, compute_routes(self.topo, self.plan)[name])
                self.sessions[name] = fresh
                log.info("%s: reconnected and reprogrammed", name)
            except (SwitchError, Exception) as exc:  # keep trying while the testbed is up
                log.warning("%s: reconnect failed: %s", name, exc)
                self.sessions[name] = fresh
                await asyncio.sleep(1.0)

    async def _age_telemetry(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(1.0)
            self.collector.expire()
            self.collector.flush()

    async def run(self) -> None:
        server = await start_server(self.run_dir, self.collector, self.advice)
        await self.start()
        watchers = [asyncio.create_task(self._watch(n)) for n in self.sessions]
        watchers.append(asyncio.create_task(self._age_telemetry()))
        watchers.append(asyncio.create_task(self.advice.run(self.stopping)))
        if self.loop_lag is not None:
            watchers.append(asyncio.create_task(watch_loop_lag(self.loop_lag, self.stopping)))
        await self.stopping.wait()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.gather(*(s.close() for s in self.sessions.values()), return_exceptions=True)
        await server.stop(0.5)
        self.collector.close()
        self.advice.close()


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
    parser.add_argument("--fidelity-file", type=Path, help="append event-loop lag per 100 ms window to this CSV")
    args = parser.parse_args(argv)
    logging.basicConfig(filename=args.run_dir / "controller.log", level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sample = None if args.int_sample_log2 < 0 else args.int_sample_log2
    controller = Controller(args.run_dir, P4Schema.load(args.p4info), sample, args.mode, args.interval_ms / 1000,
                            args.eta, args.drain_ms / 1000)
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
