"""The live page: a map of the running fabric in a browser, pushed to it as the fabric changes.

Served on 127.0.0.1 only (a free port unless `--web-port`; the address is written to the run
directory's `live.addr` and the CLI's banner prints it) by the standard library's threading HTTP
server, in the controller's web front (controller/front.py, a process of its own) or in
`testbed replay`'s process (controller/replay.py):

    /                  the page (web/live.html, web/live.js, web/live.css)
    /lib/<file>        its libraries, Cytoscape.js (the graph) and uPlot (the series), installed from
                       the npm registry by `make deps` (web/package-lock.json pins them); no CDN
    /topology.json     the fabric to draw: nodes with their tier and place, links with their ports
    /events            Server-Sent Events: a frame (JSON) every FRAME_PERIOD_S while a page is open

A frame is built once per period by one thread, however many pages watch, from a copy of the
controller's state like the one /metrics reads (controller/metrics.py: FabricState, taken on the
controller's event loop when the front asks), the fidelity windows the run's processes append to
fidelity.csv, and the faults the testbed injected (faults.csv). It carries each switch port's
utilisation, queue and hop latency with the wall time INT last reported it, each link's state, the
localiser's ranked suspects and their evidence, the advice per host, the fidelity of the last
seconds, and a timeline of faults injected and detected. While no page is open nothing is built.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from controller.metrics import FabricState
from topologies.spec import Topology
from wire import runfiles
from wire.fidelity import WINDOW_S, FidelityTail, WindowRecord, judge

log = logging.getLogger("controller.live")

FRAME_PERIOD_S = 0.1  # a frame this often while a page watches
STALE_S = 1.0  # the page draws a port INT has not reported for this long as idle (INT reports only traffic)
KEEPALIVE_S = 5.0  # an SSE comment after this long without a frame (a state read timed out)
FIDELITY_RECENT_S = 5.0  # the page's fidelity line covers the windows of the last seconds ...
FIDELITY_LAG_S = 1.0  # ... that ended this long ago (switches write their windows' lines once a second)
TIMELINE = 100  # events kept for the page's timeline
WEB_DIR = Path(__file__).resolve().parents[1] / "web"
PAGE_FILES = {"/": ("live.html", "text/html"), "/live.js": ("live.js", "text/javascript"),
              "/live.css": ("live.css", "text/css")}
LIBRARIES = {"cytoscape.min.js": "cytoscape/dist/cytoscape.min.js", "uPlot.iife.min.js": "uplot/dist/uPlot.iife.min.js",
             "uPlot.min.css": "uplot/dist/uPlot.min.css"}
LINK_TARGET = re.compile(r"^link (\S+)-(\S+)$")


def missing_libraries(web_dir: Path = WEB_DIR) -> list[str]:
    """The page's libraries not installed (`make deps` runs npm ci in web/)."""
    return [name for name, rel in LIBRARIES.items() if not (web_dir / "node_modules" / rel).is_file()]


def topology_view(topo: Topology) -> dict[str, Any]:
    """Nodes and links to draw: hosts at the bottom, each switch one tier above the nearest host,
    a tier's nodes in order of the hosts below them; multi-GPU servers as boxes round their GPUs."""
    level = {h.name: 0 for h in topo.hosts}
    frontier = [h.name for h in topo.hosts]
    while frontier:
        nxt = []
        for node in frontier:
            for other, _ in topo.neighbours(node):
                if other not in level:
                    level[other] = level[node] + 1
                    nxt.append(other)
        frontier = nxt
    top = max(level.values(), default=0)
    for sw in topo.switches:  # a switch no host reaches: on top
        level.setdefault(sw.name, top + 1)
    order: dict[str, float] = {h.name: i for i, h in enumerate(topo.hosts)}
    for tier in range(1, max(level.values(), default=0) + 1):
        for name in [n for n, lv in level.items() if lv == tier]:
            below = [order[o] for o, _ in topo.neighbours(name) if o in order and level[o] < tier]
            order[name] = sum(below) / len(below) if below else len(order)
    tiers: dict[int, list[str]] = {}
    for name, lv in level.items():
        tiers.setdefault(lv, []).append(name)
    width = max(len(names) for names in tiers.values()) if tiers else 1
    nodes = []
    for lv, names in sorted(tiers.items()):
        names.sort(key=lambda n: (order.get(n, 0), n))
        step = width * 90 / len(names)
        for i, name in enumerate(names):
            role = "host" if topo.is_host(name) else next(s.role for s in topo.switches if s.name == name)
            server = topo.server_of(name)
            nodes.append({"name": name, "kind": "host" if lv == 0 else "switch", "role": role, "tier": lv,
                          "x": round(step * (i + 0.5)), "y": (max(tiers) - lv) * 130,
                          "server": server.name if server else None})
    links = [{"id": f"{link.a}-{link.b}", "a": link.a, "b": link.b, "a_port": link.a_port, "b_port": link.b_port,
              "capacity_bps": link.capacity_mbps * 1e6} for link in topo.links]
    servers = [{"name": sv.name, "gpus": list(sv.gpus), "nvlink_bps": topo.nvlink_mbps(sv.gpus[0]) * 1e6}
               for sv in topo.servers]
    return {"name": topo.name, "nodes": nodes, "links": links, "servers": servers, "stale_s": STALE_S}


def link_text(a: str, b: str, up: bool) -> str:
    return f"link {a}-{b} {'up again' if up else 'down'} (controller)"


def alert_text(target: str, fault: str) -> str:
    return f"{fault} at {target} (localiser)"


class Frames:
    """Builds the page's frames from FabricState copies; remembers what it needs to tell changes
    (links going down and up, alerts raised). `fidelity` and `faults` give the fidelity records and
    injected faults that came since their last call: a live run's files followed as they grow
    (`following`), or a replay's records as its clock reaches them (controller/replay.py)."""

    def __init__(self, fidelity: Callable[[], list[WindowRecord]] | None = None,
                 faults: Callable[[], list[runfiles.FaultRecord]] | None = None,
                 replay: dict[str, Any] | None = None,
                 detected: Callable[[], list[tuple[float, str]]] | None = None) -> None:
        """detected: what was detected since the last call, (time, text), where the source knows its
        exact times (a replay's links.csv and diagnosis.csv); None: told from the changes between
        consecutive states, stamped with the frame's time."""
        self.fidelity = fidelity
        self.faults = faults
        self.replay = replay
        self.detected = detected
        self.records: deque[WindowRecord] = deque()
        self.events: deque[dict[str, Any]] = deque(maxlen=TIMELINE)
        self.links_up: dict[tuple[str, str], bool] = {}
        self.alerts: set[tuple[str, str]] = set()
        self.injected_loss: dict[tuple[str, str], float] = {}  # (sender, receiver) → percent in force
        self.count = 0

    def build(self, state: FabricState, now: float) -> dict[str, Any]:
        self.count += 1
        self._follow_faults()
        if self.detected is not None:
            for t, text in self.detected():
                self._event(t, "detected", text)
        for link, up in sorted(state.links.items()):
            was = self.links_up.get(link)
            if was is not None and was != up and self.detected is None:
                self._event(now, "detected", link_text(*link, up))
            self.links_up[link] = up
        alerts = {(s.target, s.fault) for s in state.suspects if s.alert}
        for target, fault in sorted(alerts - self.alerts):
            if self.detected is None:
                self._event(now, "detected", alert_text(target, fault))
        self.alerts = alerts
        lossy = {tuple(sorted(m.groups())) for s in state.suspects
                 if s.alert and s.fault == "loss" and (m := LINK_TARGET.match(s.target))}
        lossy |= {tuple(sorted(pair)) for pair, percent in self.injected_loss.items() if percent > 0}
        advice: dict[str, dict[str, float]] = {}
        for (src, dst), rate in sorted(state.advice.items()):
            advice.setdefault(src, {})[dst] = rate
        return {
            "frame": self.count, "t": now, "replay": self.replay,
            "ports": [[sw, port, peer, round(util, 4), q, hop_s, state.seen.get((sw, port, peer))]
                      for (sw, port, peer), (q, util, hop_s, _cap) in sorted(state.ports.items())],
            "links": [{"a": a, "b": b, "up": up, "lossy": tuple(sorted((a, b))) in lossy}
                      for (a, b), up in sorted(state.links.items())],
            "suspects": [{"target": s.target, "fault": s.fault, "score": round(s.score, 3), "evidence": s.evidence,
                          "alert": s.alert} for s in state.suspects[:10]],
            "advice": advice,
            "fidelity": self._fidelity(now),
            "events": list(self.events),
        }

    def _event(self, t: float, kind: str, text: str) -> None:
        self.events.append({"t": t, "kind": kind, "text": text})

    def _follow_faults(self) -> None:
        if self.faults is None:
            return
        for fault in self.faults():
            self._event(fault.began, "injected", fault.text)
            if fault.kind == "loss":
                self.injected_loss[(fault.a, fault.b)] = float(fault.fault.get("percent", 0.0))

    def _fidelity(self, now: float) -> dict[str, Any] | None:
        """Of the switches' windows in the last FIDELITY_RECENT_S that closed FIDELITY_LAG_S ago:
        how many, how many a late event spoiled, the worst lateness and where."""
        if self.fidelity is None:
            return None
        self.records.extend(self.fidelity())
        first, last = int((now - FIDELITY_LAG_S - FIDELITY_RECENT_S) / WINDOW_S), int((now - FIDELITY_LAG_S) / WINDOW_S)
        while self.records and self.records[0].window < first - 50:
            self.records.popleft()
        j = judge(self.records, first, last)
        windows = last - first
        return {"seconds": FIDELITY_RECENT_S, "windows": windows, "late": len(j.flagged),
                "held": round(1 - len(j.flagged) / windows, 3) if windows else 1.0,
                "worst_ms": round(j.worst_ms, 1), "worst_at": j.worst_source,
                "loop_worst_ms": round(max(j.loop_worst.values(), default=0.0), 1)}


def following(fidelity: Path | None, faults: Path | None) -> Frames:
    """Frames of a live run: its fidelity.csv and faults.csv followed as its processes append to them."""
    fidelity_tail = FidelityTail(fidelity) if fidelity is not None else None
    faults_tail = runfiles.LineTail(faults) if faults is not None else None
    return Frames(fidelity_tail.poll if fidelity_tail is not None else None,
                  (lambda: faults_tail.poll(runfiles.parse_fault)) if faults_tail is not None else None)


class Hub:
    """The newest frame, handed to every page's thread; built only while some page watches."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.seq = 0
        self.data = b""
        self.watchers = 0
        self.stopping = False

    def publish(self, data: bytes) -> None:
        with self.cond:
            self.seq += 1
            self.data = data
            self.cond.notify_all()

    def next(self, after: int, timeout: float) -> tuple[int, bytes] | None:
        """The frame after number `after`; None when none came within `timeout` or the hub stops."""
        with self.cond:
            self.cond.wait_for(lambda: self.seq != after or self.stopping, timeout)
            if self.seq == after or self.stopping:
                return None
            return self.seq, self.data

    @contextmanager
    def watching(self) -> Iterator[None]:
        with self.cond:
            self.watchers += 1
            self.cond.notify_all()
        try:
            yield
        finally:
            with self.cond:
                self.watchers -= 1

    def wait_for_watchers(self) -> bool:
        """Block until a page watches (True) or the hub stops (False)."""
        with self.cond:
            self.cond.wait_for(lambda: self.watchers > 0 or self.stopping)
            return not self.stopping

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


class LiveServer(ThreadingHTTPServer):
    """The page, its libraries, the topology and the frames' event stream on 127.0.0.1:port."""

    daemon_threads = True

    def __init__(self, read: Callable[[], FabricState], topo: Topology, port: int = 0, frames: Frames | None = None,
                 clock: Callable[[], float] = time.time, web_dir: Path = WEB_DIR) -> None:
        """read: the state now; frames: what else a frame shows (`following` a live run's files, or a
        replay's); clock: the frames' time (wall time, or a replay's)."""
        super().__init__(("127.0.0.1", port), LiveHandler)
        self.read = read
        self.clock = clock
        self.web_dir = web_dir
        self.topology = json.dumps(topology_view(topo)).encode()
        self.frames = frames if frames is not None else Frames()
        self.hub = Hub()
        self.threads = [threading.Thread(target=self.serve_forever, name="live-http", daemon=True),
                        threading.Thread(target=self._produce, name="live-frames", daemon=True)]
        missing = missing_libraries(web_dir)
        if missing:
            log.warning("live page: %s not installed (make deps runs npm ci in web/); the page cannot draw",
                        ", ".join(missing))

    def start(self) -> LiveServer:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.hub.stop()
        self.shutdown()
        self.server_close()
        for thread in self.threads:
            thread.join(5)

    def _produce(self) -> None:
        while self.hub.wait_for_watchers():
            due = time.monotonic() + FRAME_PERIOD_S
            try:
                state = self.read()
                frame = self.frames.build(state, self.clock())
                self.hub.publish(json.dumps(frame, separators=(",", ":")).encode())
            except Exception as exc:  # a state read that timed out on a busy loop: the next one may not
                log.warning("live page: no frame (%s: %s)", type(exc).__name__, exc)
            with self.hub.cond:
                self.hub.cond.wait_for(lambda: self.hub.stopping, max(0.0, due - time.monotonic()))


class LiveHandler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("live page: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802 (the base class's name)
        path = self.path.split("?", 1)[0]
        if path == "/events":
            self._events()
        elif path == "/topology.json":
            self._send(self.server.topology, "application/json")
        elif path in PAGE_FILES:
            name, kind = PAGE_FILES[path]
            self._file(self.server.web_dir / name, kind)
        elif path == "/favicon.ico":
            self._send(b"", "image/x-icon")
        elif path.startswith("/lib/") and path[5:] in LIBRARIES:
            name = path[5:]
            self._file(self.server.web_dir / "node_modules" / LIBRARIES[name],
                       "text/css" if name.endswith(".css") else "text/javascript")
        else:
            self.send_error(404, "not a page of the live view")

    def _file(self, path: Path, kind: str) -> None:
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            self.send_error(404, f"{path.name} is not installed: run make deps (npm ci in web/)")
            return
        self._send(body, kind)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(body)

    def _events(self) -> None:
        hub = self.server.hub
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.close_connection = True
        seq = 0
        try:
            with hub.watching():
                while not hub.stopping:
                    got = hub.next(seq, KEEPALIVE_S)
                    if got is None:
                        self.wfile.write(b": waiting for the controller\n\n")
                    else:
                        seq, data = got
                        self.wfile.write(b"data: " + data + b"\n\n")
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away
