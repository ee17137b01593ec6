"""Self-healing: every fabric link watched by its ports' carrier (netlink, controller/portstatus.py)
and by probes out of every fabric port (controller/links.py; a soft switch sends its own, told
by its device config, BMv2's go out as packet-outs: wire/probes.py); a link that fails or comes back
re-routes the fabric (only the route entries that change are written; in mode paths, with them the
pins of the flows that crossed the failed link, placed again), re-plans the advice for the capacity
that is left, and adds one row per changed link to links.csv."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from controller.advice import ADVISED, AdviceLoop
from controller.links import Change, LinkMonitor, parse_probe, probe_device_config, probe_frame
from controller.options import ControllerOptions
from controller.portstatus import watch_ports, watch_remote_ports
from controller.program import route_updates
from controller.routing import Route, compute_routes
from controller.sessions import Switches
from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire import runfiles
from wire.proto import p4r

log = logging.getLogger("controller")

LINKS_HEADER = "time,link,state,detected_wall,routes_written_ms,route_updates,advice_decided_ms\n"


class Healer:
    def __init__(self, run_dir: Path, topo: Topology, plan: AddressPlan, switches: Switches, advice: AdviceLoop,
                 options: ControllerOptions) -> None:
        self.topo, self.plan, self.switches, self.advice, self.options = topo, plan, switches, advice, options
        self.monitor: LinkMonitor | None = None
        self.down: set[frozenset[str]] = set()  # failed links (controller/routing.py's form)
        self.device_names = {plan.switches[s.name].device_id: s.name for s in topo.switches}
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Task] = set()  # re-routes started by port events
        self.timeline = (run_dir / runfiles.LINKS).open("a")
        if self.timeline.tell() == 0:  # the header on disk at once, alone: a reader never sees it with a row
            self.timeline.write(LINKS_HEADER)
            self.timeline.flush()

    def routes(self) -> dict[str, list[Route]]:
        """Routes over the links that are up; a destination a switch could reach only over links
        declared down keeps its full route: probes can be lost on a busy machine, and withdrawing
        the last path would drop what a live link still carries (a real partition drops it anyway)."""
        routes = compute_routes(self.topo, self.plan, self.down)
        if not self.down:
            return routes
        full = compute_routes(self.topo, self.plan)
        for name, kept in routes.items():
            reachable = {r.prefix for r in kept}
            kept.extend(r for r in full[name] if r.prefix not in reachable)
        return routes

    def tasks(self) -> list[asyncio.Task]:
        """Start watching: probes and carriers (none when probes are off)."""
        if self.options.probe_s <= 0:
            return []
        loop = asyncio.get_running_loop()
        self.monitor = LinkMonitor(self.topo, loop.time(), self.options.probe_s, self.options.probe_misses,
                                   self.options.hold_down_s)
        return [asyncio.create_task(self._probe(self.monitor)), asyncio.create_task(self._watch_carriers(self.monitor))]

    def soft_device_config(self, switch: str) -> bytes:
        """A soft switch's device config: the probes it sends itself (none when probes are off)."""
        return probe_device_config(self.topo, self.plan, switch, self.options.probe_s)

    def pending(self) -> set[asyncio.Task]:
        return self._pending

    def on_probe(self, name: str, packet: p4r.PacketIn) -> None:
        probe = parse_probe(packet.payload, self.device_names)
        if probe is None or self.monitor is None:
            log.debug("%s: a probe that is not ours", name)
            return
        port = self.switches.sessions[name].packet_in_fields(packet).get("ingress_port", 0)
        self.monitor.received(probe[0], (name, port), probe[1])

    async def _probe(self, monitor: LinkMonitor) -> None:
        """Every probe_s a probe out of every fabric port of the switches that do not send their own
        (BMv2: packet-outs); the monitor's changes re-route the fabric."""
        loop = asyncio.get_running_loop()
        ends = [end for end in monitor.ends() if not self.switches.sends_own_probes(end[0])]
        while not self.switches.stopping.is_set():
            sent = loop.time()  # the probe carries it: a late one still tells when the link carried it
            for switch, port in ends:
                session = self.switches.sessions[switch]
                if session.is_primary.is_set():
                    await session.packet_out(probe_frame(self.plan, switch, port, sent), port)
            await asyncio.sleep(self.options.probe_s)
            changes = monitor.tick(loop.time(), {name for name, session in self.switches.sessions.items()
                                                 if not session.is_primary.is_set()})
            if changes:
                await self.reroute(changes)

    async def _watch_carriers(self, monitor: LinkMonitor) -> None:
        """Fabric ports' carrier: a lost one re-routes at once, before any probe is missed. Netlink for the
        switches here; for a switch on another server (cluster mode: its `remote` in switches.json, the
        command prefix that runs a command there), that server's `ip monitor`, one stream per server."""
        where: dict[tuple[str, ...], dict[str, tuple[str, int]]] = {}
        for name, info in self.switches.info.items():
            for port, iface in info.get("ports", {}).items():
                where.setdefault(tuple(info.get("remote", ())), {})[iface] = (name, int(port))
        loop = asyncio.get_running_loop()

        def changed(end: tuple[str, int], up: bool) -> None:
            changes = monitor.port_status(end, up, loop.time())
            if changes:
                task = loop.create_task(self.reroute(changes))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

        async def watch(remote: tuple[str, ...], ports: dict[str, tuple[str, int]]) -> None:
            here = "here" if not remote else " ".join(remote)
            try:
                if remote:
                    await watch_remote_ports(list(remote), ports, changed, self.switches.stopping)
                else:
                    await watch_ports(ports, changed, self.switches.stopping)
            except OSError as exc:  # no netlink here, or the server's stream ended: probes alone find failures
                log.error("port status unavailable (%s): link failures %s are found by probes only", exc, here)
            except Exception:  # noqa: BLE001 - logged in full; probes still find failures
                log.exception("port status watch failed (%s): link failures are found by probes only", here)

        await asyncio.gather(*(watch(remote, ports) for remote, ports in where.items()))

    async def reroute(self, changes: list[Change]) -> None:
        """Routes for the links that are up, written as changes only; the advice re-planned for
        the capacity that is left; one timeline row per changed link (links.csv). One at a time:
        each writes the difference from the routes its predecessor left."""
        detected = time.time()
        async with self._lock:
            await self._reroute_locked(changes, detected)

    async def _reroute_locked(self, changes: list[Change], detected: float) -> None:
        assert self.monitor is not None
        self.down = self.monitor.down()
        routes = self.routes()
        sessions, state = self.switches.sessions, self.switches.route_state
        pins = self.advice.set_routes(routes)  # mode paths: flows off the failed link, with the routes
        writes = {name: route_updates(sessions[name].schema, routes[name], state[name]) + pins.get(name, [])
                  for name in sessions if name in state}
        results = await asyncio.gather(*(sessions[n].write(u) for n, u in writes.items() if u),
                                       return_exceptions=True)
        for error in results:
            if isinstance(error, BaseException):
                log.error("re-route: a write failed: %s", error)
        written = time.time()
        decided = await self._replan(changes)
        count = sum(len(u) for u in writes.values())
        for change in changes:
            link = "-".join(sorted(change.link))
            state_word = "up" if change.up else "down"
            log.warning("link %s %s: detected%s, %d route updates written in %.1f ms", link, state_word,
                        f" ({change.why})" if change.why else "", count, (written - detected) * 1e3)
            self.timeline.write(f"{time.time():.6f},{link},{state_word},{detected:.6f},"
                                f"{(written - detected) * 1e3:.2f},{count},"
                                f"{'' if decided is None else f'{(decided - detected) * 1e3:.2f}'}\n")
        self.timeline.flush()

    async def _replan(self, changes: list[Change]) -> float | None:
        """The advice told of the changed links; in mode advice, the wall time its next decision
        came (None: none within a second, or another mode)."""
        steps = self.advice.steps
        for change in changes:
            self.advice.set_links(list(change.ends), change.up)
        if self.advice.mode not in ADVISED:
            return None
        deadline = time.monotonic() + 1.0
        while self.advice.steps == steps and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        return time.time() if self.advice.steps != steps else None

    def close(self) -> None:
        self.timeline.close()
