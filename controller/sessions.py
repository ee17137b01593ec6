"""The controller's P4Runtime sessions, one per switch: connect, push the pipeline and program the
switch from the topology; dispatch its packet-ins by reason; when a session is lost, reconnect with
backoff and reprogram (a soft switch's device config asks it to send its own link probes:
wire/probes.py). The other parts of the controller write and read through `sessions`."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from controller.p4rt_client import SwitchError, SwitchSession
from controller.program import RouteState, switch_program
from controller.routing import Route
from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire import runfiles
from wire.intmd import DSCP_INT
from wire.p4info import P4Schema
from wire.proto import p4r

log = logging.getLogger("controller")

RECONNECT_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
PacketInHandler = Callable[[str, p4r.PacketIn], object]


class Switches:
    def __init__(self, run_dir: Path, topo: Topology, plan: AddressPlan, schema: P4Schema,
                 int_sample_log2: int | None, stopping: asyncio.Event, *, int_dscp: int = DSCP_INT) -> None:
        self.run_dir, self.topo, self.plan, self.schema = run_dir, topo, plan, schema
        self.int_sample_log2, self.int_dscp = int_sample_log2, int_dscp
        self.stopping = stopping
        self.info: dict[str, dict] = json.loads((run_dir / runfiles.SWITCHES).read_text())["switches"]
        self.schemas: dict[str, P4Schema] = {}
        self.sessions: dict[str, SwitchSession] = {}
        self.route_state: dict[str, RouteState] = {}
        self.packet_ins = 0
        # Set by the controller that owns these: the routes a reconnected switch gets, entries a (re)programmed
        # switch must get back beside its program (injected loss), packet-in handlers by reason.
        self.routes_for: Callable[[str], list[Route]] = lambda name: []
        self.restore: Callable[[P4Schema, str], list[p4r.Update]] = lambda schema, name: []
        self.handlers: dict[int, PacketInHandler] = {}
        # A soft switch's device config (wire/probes.py: the probes it sends itself); BMv2's is p4c's JSON.
        self.soft_device_config: Callable[[str], bytes] = lambda name: b""

    def device_config(self, name: str) -> bytes:
        """The target-specific part of the switch's pipeline config."""
        if self.sends_own_probes(name):
            return self.soft_device_config(name)
        path = self.info[name].get("device_config")
        return Path(path).read_bytes() if path else b""

    def sends_own_probes(self, name: str) -> bool:
        """Whether the switch sends its fabric ports' probes itself (a soft switch) or needs packet-outs."""
        return self.info[name].get("kind") == "soft"

    def schema_of(self, name: str) -> P4Schema:
        """The P4Info this switch runs: p4c's output for BMv2, else the committed one."""
        path = self.info[name].get("p4info")
        if not path:
            return self.schema
        if path not in self.schemas:
            self.schemas[path] = P4Schema.load(path)
        return self.schemas[path]

    def _session(self, name: str) -> SwitchSession:
        sw = self.info[name]
        return SwitchSession(name, sw["grpc"], sw["device_id"], self.schema_of(name),
                             request_log=self.run_dir / runfiles.P4RUNTIME_LOG)

    async def program(self, session: SwitchSession, routes: list[Route]) -> int:
        await session.set_pipeline(self.device_config(session.name))
        self.route_state[session.name] = state = RouteState()
        updates = switch_program(session.schema, self.topo, self.plan, session.name, routes, self.int_sample_log2,
                                 state, int_dscp=self.int_dscp)
        updates += self.restore(session.schema, session.name)
        await session.write(updates)
        return len(updates)

    async def start(self, routes: dict[str, list[Route]]) -> dict[str, int]:
        """Every switch connected and programmed with its routes (computed once for all of them by
        the caller); the number of updates each took."""
        names = [s.name for s in self.topo.switches]
        for name in names:
            self.sessions[name] = self._session(name)
        await asyncio.gather(*(self.sessions[n].connect() for n in names))
        counts = await asyncio.gather(*(self.program(self.sessions[n], routes[n]) for n in names))
        for name, count in zip(names, counts, strict=True):
            log.info("%s programmed: %d updates", name, count)
        return dict(zip(names, counts, strict=True))

    async def watch(self, name: str) -> None:
        """Dispatch the switch's PacketIns; when its session is lost, reconnect and reprogram."""
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
                        await self.reconnect(name)
                    continue
            self.packet_ins += 1
            reason = session.packet_in_fields(packet).get("reason", 0)
            handler = self.handlers.get(reason)
            if handler is None:
                log.debug("%s: packet-in with reason %d ignored", name, reason)
                continue
            try:
                handler(name, packet)
            except Exception:  # noqa: BLE001 - one bad packet-in must not end the switch's watcher
                log.exception("%s: packet-in (reason %d) handler failed", name, reason)

    async def reconnect(self, name: str) -> None:
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
                await self.program(fresh, self.routes_for(name))
                log.info("%s: reconnected and reprogrammed", name)
                return
            except (SwitchError, grpc.aio.AioRpcError, OSError) as exc:
                log.warning("%s: reconnect attempt %d failed: %s", name, attempt + 1, exc)
            except Exception:  # noqa: BLE001 - a bug here must not end the watcher either; it is logged in full
                log.exception("%s: reconnect attempt %d failed", name, attempt + 1)
            await fresh.close()
            await asyncio.sleep(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sessions.values()), return_exceptions=True)
