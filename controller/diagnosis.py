"""Fault localisation in the controller: every second the fabric ports' counters (one P4Runtime
Read per switch), the link states the healer holds and the INT collector's hop latencies and drain
rates go into the localiser (controller/localizer.py), with the NVLink ports' counters on multi-GPU
servers (controller/nvlinks.py); its alerts go to the log and diagnosis.csv, its ranking (each time it
changes) to suspects.csv. The ranks' step timings (ReportSteps) are evidence too."""

from __future__ import annotations

import asyncio
import csv
import logging
import time
from collections.abc import Callable
from pathlib import Path

from controller.faults import step_work
from controller.localizer import Localizer, Suspect
from controller.nvlinks import NvLinkCounters
from controller.sessions import Switches
from controller.telemetry import Collector
from topologies.spec import Topology
from wire import advice_pb2 as pb
from wire import runfiles
from wire.drops import DROP_COUNTER, DROP_REASONS, by_reason

log = logging.getLogger("controller")

DIAGNOSIS_HEADER = "time,target,fault,score,evidence\n"


class Diagnoser:
    def __init__(self, run_dir: Path, topo: Topology, switches: Switches, collector: Collector,
                 host_by_ip: dict[str, str], down: Callable[[], set[frozenset[str]]]) -> None:
        self.switches, self.collector, self.host_by_ip, self.down = switches, collector, host_by_ip, down
        self.localizer = Localizer(topo)
        self.nvlinks = NvLinkCounters(topo)
        self.localized_at = 0.0
        self.last_counters: dict[tuple[str, int], tuple[int, int, int]] = {}  # the last read (for /metrics)
        self.last_drops: dict[str, dict[str, int]] = {}  # switch → drop reason → frames, the last read (/metrics)
        self.log = (run_dir / runfiles.DIAGNOSIS).open("a")
        if self.log.tell() == 0:
            self.log.write(DIAGNOSIS_HEADER)
        self.suspects_file = (run_dir / runfiles.SUSPECTS).open("a", newline="")
        self.suspects_log = csv.writer(self.suspects_file)
        if self.suspects_file.tell() == 0:
            self.suspects_log.writerow(runfiles.SUSPECTS_FIELDS)
        self.last_ranking: list[tuple[str, str, bool]] | None = None

    def diagnosis(self) -> tuple[list[Suspect], list[tuple[float, Suspect]], float]:
        return self.localizer.ranked(), list(self.localizer.alerts), self.localized_at

    def report_steps(self, report: pb.StepReport) -> int:
        """A rank's step timings into the localiser; the hosts it holds timings of."""
        return self.localizer.add_steps(time.time(), *step_work(report, self.host_by_ip))

    async def counters(self) -> dict[tuple[str, int], tuple[int, int, int]]:
        """Every fabric port's (rx packets, tx packets, tx bytes), read over P4Runtime: one Read per
        switch for just those cells (and its drop reasons', kept in last_drops)."""
        sessions = self.switches.sessions
        ports: dict[str, list[int]] = {}
        for sender, _receiver, _ in self.localizer.directions:
            ports.setdefault(sender[0], []).append(sender[1])
        names = [n for n in ports if sessions[n].is_primary.is_set()]
        drops = [(DROP_COUNTER, i) for i in range(len(DROP_REASONS))]  # the same Read: for /metrics
        results = await asyncio.gather(*(sessions[n].read_counter_cells(
            [(c, p) for p in ports[n] for c in ("StarIngress.port_rx", "StarEgress.port_tx")] + drops) for n in names),
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
            self.last_drops[name] = {reason: cells[0] for reason, cells in
                                     by_reason({i: result[(c, i)] for c, i in drops if (c, i) in result}).items()}
        return counters

    async def run(self, period_s: float = 1.0) -> None:
        """Every second: counters, link states and INT into the localiser; its alerts into the log
        and diagnosis.csv."""
        sampler = asyncio.create_task(self.nvlinks.run(self.switches.stopping))
        try:
            await self._ticks(period_s)
        finally:
            sampler.cancel()

    async def _ticks(self, period_s: float) -> None:
        while not self.switches.stopping.is_set():
            await asyncio.sleep(period_s)
            try:
                if self.nvlinks.ports:
                    await self.nvlinks.read_speeds()
                counters = await self.counters()
                self.last_counters = counters
                alerts = len(self.localizer.alerts)
                wall = time.time()
                self.localizer.update(wall, counters, set(self.down()), self.collector.take_latency_lows(),
                                      self.collector.take_drain_rates(), self.nvlinks.readings(time.monotonic()))
                self.localized_at = wall
                for at, s in self.localizer.alerts[alerts:]:
                    log.warning("localiser: %s (%s, score %.2f): %s", s.target, s.fault, s.score, s.evidence)
                    self.log.write(f"{at:.3f},{s.target},{s.fault},{s.score:.3f},\"{s.evidence}\"\n")
                self.log.flush()
                self._log_ranking(wall)
            except Exception:  # noqa: BLE001 - a bug in one tick must not end localisation; it is logged in full
                log.exception("localiser: tick failed")

    def _log_ranking(self, wall: float) -> None:
        """The ranked suspects into suspects.csv when their order or alerts changed (a replay's)."""
        ranked = self.localizer.ranked()
        ranking = [(s.target, s.fault, s.alert) for s in ranked]
        if ranking == self.last_ranking:
            return
        self.last_ranking = ranking
        self.suspects_log.writerows(runfiles.suspects_rows(
            wall, [(s.target, s.fault, s.score, s.alert, s.evidence) for s in ranked]))
        self.suspects_file.flush()

    def close(self) -> None:
        self.log.close()
        self.suspects_file.close()
