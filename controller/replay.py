"""A finished run played back on the live page (controller/live.py): the same page, its frames built
from the run directory's files instead of the controller's state, on a clock that starts when the
first page opens and runs `speed` times the run's own.

    python -m testbed replay runs/<run> [--speed 4] [--from 30] [--port PORT]

What a frame shows, and from where (wire/runfiles.py): each port's utilisation, queue and hop
latency from telemetry.csv (every INT report the collector took in), links going down and up from
links.csv, the localiser's ranked suspects from suspects.csv and its alerts from diagnosis.csv,
the advice in force from advice.csv, the faults injected from faults.csv and the fidelity windows
from fidelity.csv — each as it stood at the replay clock's time.
"""

from __future__ import annotations

import bisect
import time
from pathlib import Path
from typing import Any

from controller.live import Frames, LiveServer, alert_text, link_text
from controller.localizer import Suspect
from controller.metrics import FabricState, PortKey
from topologies.addressing import AddressPlan
from topologies.spec import Topology, load_topology
from wire import runfiles
from wire.fidelity import WindowRecord, read_records


class RunNotReplayable(ValueError):
    """A directory that is not a run directory, or holds nothing to replay."""


class Replay:
    """The run's timelines, and the state they give at a time; `clock` the replay's time."""

    def __init__(self, run_dir: Path, speed: float = 1.0, start_s: float = 0.0) -> None:
        self.run_dir = Path(run_dir)
        if not (self.run_dir / runfiles.TOPOLOGY).is_file():
            raise RunNotReplayable(f"{self.run_dir}: no {runfiles.TOPOLOGY}: not a run directory")
        if speed <= 0:
            raise RunNotReplayable(f"speed must be above 0, got {speed}")
        self.topo: Topology = load_topology(self.run_dir / runfiles.TOPOLOGY)
        self.speed = speed
        peer = {(n, link.port_of(n)): link.other(n) for link in self.topo.links for n in (link.a, link.b)}
        self.capacity = {(n, link.port_of(n)): link.capacity_mbps * 1e6 for link in self.topo.links
                         for n in (link.a, link.b)}
        self.telemetry = [((r.switch, r.port, peer.get((r.switch, r.port), "")), r)
                          for r in runfiles.read_telemetry(self.run_dir / runfiles.TELEMETRY)]
        self.links: list[tuple[float, tuple[str, str], bool]] = []
        for row in runfiles.read_rows(self.run_dir / runfiles.LINKS):
            a, _, b = row.get("link", "").partition("-")
            if a and b:
                self.links.append((float(row["time"]), (min(a, b), max(a, b)), row["state"] == "up"))
        named = {(min(link.a, link.b), max(link.a, link.b)): (link.a, link.b) for link in self.topo.links}
        self.detected = sorted([(t, link_text(*named.get(pair, pair), up)) for t, pair, up in self.links] +
                               [(float(row["time"]), alert_text(row["target"], row["fault"]))
                                for row in runfiles.read_rows(self.run_dir / runfiles.DIAGNOSIS)])
        self.suspects = runfiles.read_suspects(self.run_dir)
        host = {a.ip: name for name, a in AddressPlan(self.topo).hosts.items()}
        self.advice = [(float(row["time"]), host.get(row["src"], row["src"]), host.get(row["dst"], row["dst"]),
                        0.0 if row["reason"] == "clear" else float(row["rate_bps"]))
                       for row in runfiles.read_rows(self.run_dir / runfiles.ADVICE)]
        self.faults = runfiles.read_faults(self.run_dir)
        self.records: list[WindowRecord] = sorted(read_records(self.run_dir / runfiles.FIDELITY),
                                                  key=lambda r: r.window)
        times = [t for t, *_ in self.links] + [r.time for _, r in self.telemetry] + [f.began for f in self.faults] + \
            [t for t, _ in self.suspects] + [t for t, *_ in self.advice]
        if not times:
            raise RunNotReplayable(f"{self.run_dir}: no telemetry, links, suspects, advice or faults to replay")
        self.t0, self.t1 = min(times), max(times)
        self.start = self.t0 + start_s
        self.started: float | None = None
        # what the state holds so far, and how far each timeline has been read
        self.at = {"telemetry": 0, "links": 0, "advice": 0, "faults": 0, "records": 0, "detected": 0}
        self.ports: dict[PortKey, runfiles.QueueReading] = {}
        self.link_up = {(min(link.a, link.b), max(link.a, link.b)): True for link in self.topo.links}
        self.advised: dict[tuple[str, str], float] = {}

    def clock(self) -> float:
        """The run's time the replay shows: from `start` when first asked, `speed` times real time."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        return min(self.t1, self.start + (now - self.started) * self.speed)

    def _due(self, name: str, items: list[Any], t: float, time_of: Any) -> list[Any]:
        i = self.at[name]
        j = i
        while j < len(items) and time_of(items[j]) <= t:
            j += 1
        self.at[name] = j
        return items[i:j]

    def state(self, t: float) -> FabricState:
        """The fabric as the run's files have it at time t (t only grows from call to call)."""
        for key, reading in self._due("telemetry", self.telemetry, t, lambda item: item[1].time):
            self.ports[key] = reading
        for _, link, up in self._due("links", self.links, t, lambda item: item[0]):
            self.link_up[link] = up
        for _, src, dst, rate in self._due("advice", self.advice, t, lambda item: item[0]):
            if rate > 0:
                self.advised[(src, dst)] = rate
            else:
                self.advised.pop((src, dst), None)
        ranked = self.suspects[bisect.bisect_right([s for s, _ in self.suspects], t) - 1][1] \
            if self.suspects and self.suspects[0][0] <= t else []
        return FabricState(
            ports={key: (float(r.queue_pkts), r.utilisation or 0.0, r.hop_latency_us / 1e6,
                         self.capacity.get(key[:2], 0.0)) for key, r in self.ports.items()},
            seen={key: r.time for key, r in self.ports.items()},
            links={(link.a, link.b): self.link_up[(min(link.a, link.b), max(link.a, link.b))]
                   for link in self.topo.links},
            advice=dict(self.advised),
            suspects=[Suspect(target, fault, score, evidence, alert=alert)
                      for target, fault, score, alert, evidence in ranked])

    def frames(self) -> Frames:
        return Frames(fidelity=lambda: self._due("records", self.records, self.clock(), lambda r: r.start),
                      faults=lambda: self._due("faults", self.faults, self.clock(), lambda f: f.began),
                      replay={"run": self.run_dir.name, "t0": self.t0, "t1": self.t1, "speed": self.speed},
                      detected=lambda: self._due("detected", self.detected, self.clock(), lambda d: d[0]))

    def serve(self, port: int = 0) -> LiveServer:
        return LiveServer(lambda: self.state(self.clock()), self.topo, port, self.frames(), self.clock).start()
