"""Fault localisation (the Lingjing analogue): every second, rank the links and switches that explain
what the fabric shows, with the evidence, and raise an alert for a suspect that persists.

Evidence, per kind of fault:
- a link that is down: its carrier or its probes (controller/links.py);
- a link direction that loses frames: the sender's port_tx against the receiver's port_rx over the
  last `window` seconds (P4Runtime counters; injected or real loss happens before port_rx counts);
- a port that drains below its capacity: the rate it drained at between INT samples that both
  found a queue there, well under the link's capacity (a backlogged healthy port drains at its
  capacity, however bursty its traffic);
- a switch that holds frames: the lowest hop latency INT reported on its ports over a second, less
  the queueing its queue explains, stays high on most of its busy ports;
- a degraded NVLink (multi-GPU servers): its speed under the topology's rate, as NVML reports a
  link that trained down (controller/nvlinks.py reads the port's shaper); traffic alone cannot pin it:
  in a ring the GPU after a slow one receives as slowly as the slow one does;
- a slow host: the all-reduce ranks report their step timings piece by piece (ReportSteps), each
  with the rank's own work on the data once it was there (reduce or copy). A host whose median
  work per piece, over the last seconds, is many times its peers' is slow whatever the network
  does; its peers only wait for it, which no network evidence above mistakes for a fault.

Targets are what a fault is pinned to: ``link s1-s3`` (ends sorted), ``switch s3`` or ``host h3``.
On multi-GPU servers the evidence starts with what the target is there: ``GPU h3 of srv1 (rail s5)``
for the host, ``NIC of GPU h3 of srv1 (rail s5)`` for its link to the rail's leaf, ``NVLink of GPU h3
of srv1`` for ``link h3-srv1``.
Pure logic fed with readings and times; the controller drives it (controller/diagnosis.py), the tests
drive it with data.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from topologies.spec import Topology

Port = tuple[str, int]  # (switch, port)
Counters = dict[Port, tuple[int, int, int]]  # rx packets, tx packets, tx bytes (cumulative)
FRAME_BITS = 1500 * 8


@dataclass(frozen=True)
class NvLinkReading:
    """A GPU's NVLink port over the last seconds, what it received (controller/nvlinks.py)."""

    speed_mbps: float  # its speed now (NVML's link speed; here its shaper's rate)
    nominal_mbps: float  # the NVLink's rate by the topology
    bytes: int  # it carried toward its GPU over the last seconds ...
    peak_mbps: float  # ... at most this fast over 50 ms


@dataclass
class Suspect:
    target: str  # "link s1-s3" | "switch s3" | "host h3" | "link h3-srv1" (an NVLink)
    fault: str  # down | loss | slow-port | slow-switch | slow-host | slow-nvlink
    score: float  # 0..1, how strongly the evidence points here
    evidence: str
    since: float = 0.0  # wall time it was first seen in this run of ticks
    ticks: int = 1  # consecutive ticks it was seen
    alert: bool = False


@dataclass
class Params:
    window: int = 2  # ticks (seconds) of counters a loss is computed over
    persist: int = 2  # consecutive ticks before a suspect is an alert ...
    persist_host: int = 3  # ... a slow host: a machine stall of a second or two slows some rank's pieces
    #                        for two ticks (false alarms in a no-fault trial, CI machine, 2026-12-06)
    persist_loss: int = 3  # ... a loss: longer than its window, so one burst of drops (a receiving
    #                        switch that stalled and overflowed its socket) cannot alert alone
    loss_min: float = 0.015  # a direction losing at least this share of what was sent (2% is the gray case)
    loss_min_packets: int = 200  # ... of at least this many frames in the window (100 a second)
    slow_port_ratio: float = 0.75  # a backlogged port draining below this share of its capacity ...
    slow_port_samples: int = 30  # ... in the median of at least this many INT samples of the second
    slow_switch_us: float = 2000.0  # lowest hop latency above what its queue explains
    slow_switch_share: float = 0.6  # ... on at least this share of its ports INT saw
    host_window_s: float = 3.0  # step timings older than this are forgotten
    slow_host_pieces: int = 5  # a host's median work per received piece, over at least this many, ...
    slow_host_ms: float = 20.0  # ... at least this long (5 ms before 2026-12-06, when a busy machine's ranks
    #                             showed 8-16 ms medians for seconds with no fault: a slower host hides in that)
    slow_host_ratio: float = 4.0  # ... and this many times the median of the other hosts' medians ...
    slow_host_peers: int = 2  # ... of at least this many other hosts
    slow_nvlink_ratio: float = 0.95  # an NVLink running under this share of its rate (tc rounds rates a little)


@dataclass
class Localizer:
    topo: Topology
    params: Params = field(default_factory=Params)

    def __post_init__(self) -> None:
        self.history: deque[tuple[float, Counters]] = deque(maxlen=self.params.window + 1)
        self.down_history: deque[set[frozenset[str]]] = deque(maxlen=self.params.window + 1)
        self.suspects: dict[tuple[str, str], Suspect] = {}
        self.step_work: dict[str, deque[tuple[float, float]]] = {}  # host → (time reported, work s per piece)
        self.alerts: list[tuple[float, Suspect]] = []  # (time raised, the suspect then)
        # fabric link directions: (sender end, receiver end, capacity Mbit/s)
        self.directions: list[tuple[Port, Port, float]] = []
        self.capacity: dict[Port, float] = {}
        self.peer: dict[Port, str] = {}
        self.in_servers: dict[str, str] = {}  # target → what it is on a multi-GPU server
        for server in self.topo.servers:
            for gpu in server.gpus:
                rail = self.topo.host_link(gpu).other(gpu)
                self.in_servers[f"host {gpu}"] = f"GPU {gpu} of {server.name} (rail {rail})"
                self.in_servers[self.link_target(gpu, rail)] = f"NIC of GPU {gpu} of {server.name} (rail {rail})"
                self.in_servers[self.link_target(gpu, server.name)] = f"NVLink of GPU {gpu} of {server.name}"
        for link in self.topo.links:
            ends = ((link.a, link.a_port, link.b, link.b_port), (link.b, link.b_port, link.a, link.a_port))
            for a, ap, b, bp in ends:
                if self.topo.is_switch(a):
                    self.capacity[(a, ap)] = link.capacity_mbps
                    self.peer[(a, ap)] = b
                    if self.topo.is_switch(b):
                        self.directions.append(((a, ap), (b, bp), link.capacity_mbps))

    @staticmethod
    def link_target(a: str, b: str) -> str:
        return f"link {'-'.join(sorted((a, b)))}"

    def add_steps(self, now: float, host: str, work_s: list[float]) -> int:
        """A rank on `host` reported its received pieces' own work (seconds each); the number of
        hosts with step timings in the window."""
        self.step_work.setdefault(host, deque(maxlen=1000)).extend((now, w) for w in work_s)
        self._forget_steps(now)
        return len(self.step_work)

    def _forget_steps(self, now: float) -> None:
        for host, q in list(self.step_work.items()):
            while q and q[0][0] < now - self.params.host_window_s:
                q.popleft()
            if not q:
                del self.step_work[host]

    def update(self, now: float, counters: Counters, down: set[frozenset[str]],
               latency_lows: dict[Port, tuple[int, int]], drain_rates: dict[Port, list[float]],
               nvlinks: dict[str, NvLinkReading] | None = None) -> list[Suspect]:
        """One tick: the ranked suspects now (alerts flagged). nvlinks: GPU → its NVLink port's reading."""
        self.history.append((now, counters))
        self.down_history.append(set(down))
        found: list[Suspect] = []
        for link in sorted(down, key=sorted):
            a, b = sorted(link)
            found.append(Suspect(self.link_target(a, b), "down", 1.0, "carrier lost or probes missing (links.csv)"))
        found += self._loss()
        found += self._slow_ports(drain_rates)
        found += self._slow_switches(latency_lows)
        found += self._slow_hosts(now)
        found += self._slow_nvlinks(nvlinks or {})
        merged: dict[tuple[str, str], Suspect] = {}
        for s in found:  # one suspect per target and fault: the strongest evidence
            if s.target in self.in_servers:
                s.evidence = f"{self.in_servers[s.target]}: {s.evidence}"
            key = (s.target, s.fault)
            if key not in merged or s.score > merged[key].score:
                merged[key] = s
        current = {}
        for key, s in merged.items():
            before = self.suspects.get(key)
            s.since = before.since if before else now
            s.ticks = before.ticks + 1 if before else 1
            s.alert = s.ticks >= {"loss": self.params.persist_loss,
                                  "slow-host": self.params.persist_host}.get(s.fault, self.params.persist)
            if s.alert and not (before and before.alert):
                self.alerts.append((now, s))
            current[key] = s
        self.suspects = current
        return self.ranked()

    def ranked(self) -> list[Suspect]:
        return sorted(self.suspects.values(), key=lambda s: (-s.alert, -s.score, s.target))

    def _loss(self) -> list[Suspect]:
        if len(self.history) < 2:
            return []
        (t0, old), (t1, new) = self.history[0], self.history[-1]
        recently_down = set().union(*self.down_history)  # frames in flight when a link was cut are no loss
        out = []
        for sender, receiver, _ in self.directions:
            if sender not in old or sender not in new or receiver not in old or receiver not in new or \
                    frozenset((sender[0], receiver[0])) in recently_down:
                continue
            sent = new[sender][1] - old[sender][1]
            got = new[receiver][0] - old[receiver][0]
            if sent < self.params.loss_min_packets:
                continue
            loss = 1 - got / sent
            if loss >= self.params.loss_min:
                out.append(Suspect(self.link_target(sender[0], receiver[0]), "loss",
                                   min(1.0, 0.5 + loss * 5),
                                   f"{sender[0]} -> {receiver[0]}: {sent - got} of {sent} frames lost "
                                   f"({100 * loss:.1f}%) over {t1 - t0:.0f} s (port_tx {sender[0]}:{sender[1]} "
                                   f"vs port_rx {receiver[0]}:{receiver[1]})"))
        return out

    def _slow_ports(self, drain_rates: dict[Port, list[float]]) -> list[Suspect]:
        out = []
        for port, rates in drain_rates.items():
            capacity = self.capacity.get(port)
            if not capacity or len(rates) < self.params.slow_port_samples:
                continue
            rate = statistics.median(rates)
            if rate < self.params.slow_port_ratio * capacity:
                out.append(Suspect(self.link_target(port[0], self.peer[port]), "slow-port",
                                   min(1.0, 0.4 + 0.6 * (1 - rate / capacity)),
                                   f"{port[0]}:{port[1]} -> {self.peer[port]} drains {rate:.1f} of {capacity:g} "
                                   f"Mbit/s while backlogged (median of {len(rates)} INT samples)"))
        return out

    def _slow_switches(self, latency_lows: dict[Port, tuple[int, int]]) -> list[Suspect]:
        by_switch: dict[str, list[float]] = {}
        for port, (low_us, queue) in latency_lows.items():
            capacity = self.capacity.get(port)
            if not capacity:
                continue
            queue = queue if queue < 0xFFFFFF else 0  # all-ones: the target could not tell
            # The frames ahead of it and its own time on the wire: a frame that found the queue empty
            # may still wait for the port's tokens (at 1 Mbit/s, 12 ms: what a frame takes there).
            by_switch.setdefault(port[0], []).append(low_us - (queue + 1) * FRAME_BITS / capacity)
        out = []
        for switch, excess in sorted(by_switch.items()):
            slow = [e for e in excess if e >= self.params.slow_switch_us]
            if len(slow) >= max(1, self.params.slow_switch_share * len(excess)):
                typical = statistics.median(excess)
                out.append(Suspect(f"switch {switch}", "slow-switch", min(1.0, 0.4 + typical / 20_000),
                                   f"hop latency at least {typical / 1000:.1f} ms more than its queues explain on "
                                   f"{len(slow)} of {len(excess)} ports (INT, fastest frame of the second)"))
        return out

    def _slow_nvlinks(self, nvlinks: dict[str, NvLinkReading]) -> list[Suspect]:
        out = []
        for gpu, r in sorted(nvlinks.items()):
            server = self.topo.server_of(gpu)
            if server is None or r.speed_mbps >= self.params.slow_nvlink_ratio * r.nominal_mbps:
                continue
            out.append(Suspect(self.link_target(gpu, server.name), "slow-nvlink",
                               min(1.0, 0.5 + 0.5 * (1 - r.speed_mbps / r.nominal_mbps)),
                               f"runs at {r.speed_mbps:.1f} of {r.nominal_mbps:g} Mbit/s (its link speed); it "
                               f"carried {r.bytes / 1e6:.1f} MB to its GPU in the last seconds, at most "
                               f"{r.peak_mbps:.1f} Mbit/s over 50 ms (NVLink counters)"))
        return out

    def _slow_hosts(self, now: float) -> list[Suspect]:
        self._forget_steps(now)
        medians = {host: (statistics.median(w for _, w in q), len(q)) for host, q in self.step_work.items()
                   if len(q) >= self.params.slow_host_pieces}
        out = []
        for host, (work, pieces) in sorted(medians.items()):
            others = [m for h, (m, _) in medians.items() if h != host]
            if len(others) < self.params.slow_host_peers:
                continue
            typical = statistics.median(others)
            if work >= self.params.slow_host_ms / 1000 and work >= self.params.slow_host_ratio * typical:
                out.append(Suspect(f"host {host}", "slow-host", min(1.0, 0.4 + (work - typical) / 0.1),
                                   f"its ranks' own work per received piece is {1000 * work:.1f} ms (median of "
                                   f"{pieces} in {self.params.host_window_s:g} s) against {1000 * typical:.2f} ms on "
                                   f"{len(others)} other hosts (step timings, ReportSteps)"))
        return out
