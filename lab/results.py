"""What a scenario run measured, per mode: its jobs, ports, faults and links (results.json), the
records the runner (lab/experiment.py) fills and the report (lab/report.py) reads."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lab.scenario import Scenario


@dataclass
class JobRecord:
    name: str
    kind: str
    start_s: float
    started: float = math.nan  # wall clock
    ended: float = math.nan
    ok: bool = False
    error: str = ""
    figures: dict = field(default_factory=dict)  # busbw_mbps, wrong, flows_completed, fct_p99_ms, ...
    workdir: str = ""

    @property
    def elapsed_s(self) -> float:
        return self.ended - self.started


@dataclass
class PortFigures:
    switch: str
    port: int
    peer: str
    readings: int
    p99_queue: float  # over all readings in the span
    p99_queue_faithful: float
    drops: int | None  # None: not counted (BMv2)
    utilisation: float | None  # bytes sent over the span / capacity


@dataclass
class ModeRun:
    mode: str
    run_dir: str
    t0: float
    t1: float
    verdict: str
    faithful_share: float
    jobs: list[JobRecord]
    ports: list[PortFigures]
    faults: list[dict]
    host_rates: str = ""  # the sampled host rates (CSV)
    links: list[dict] = field(default_factory=list)  # the controller's link timeline rows in the run (links.csv)
    loop_lag_ms: dict[str, float] = field(default_factory=dict)  # worst event-loop lag per loop ("controller", agents)

    def worst_port(self) -> PortFigures | None:
        """The port with the highest p99 queue over faithful windows; when no port had enough
        faithful readings (an unfaithful run), the highest over all windows (worst_basis says which)."""
        ranked = [p for p in self.ports if not math.isnan(p.p99_queue_faithful)]
        if ranked:
            return max(ranked, key=lambda p: (p.p99_queue_faithful, p.drops or 0))
        ranked = [p for p in self.ports if not math.isnan(p.p99_queue)]
        return max(ranked, key=lambda p: (p.p99_queue, p.drops or 0), default=None)

    @property
    def worst_basis(self) -> str:
        """"faithful" when worst_port ranked faithful windows, "all" when it had to rank all windows."""
        return "faithful" if any(not math.isnan(p.p99_queue_faithful) for p in self.ports) else "all"

    def worst_p99(self) -> float | None:
        """worst_port's p99 queue on worst_basis's windows (None: no INT readings at all)."""
        worst = self.worst_port()
        if worst is None:
            return None
        return worst.p99_queue_faithful if self.worst_basis == "faithful" else worst.p99_queue

    @property
    def drops(self) -> int | None:
        counted = [p.drops for p in self.ports if p.drops is not None]
        return sum(counted) if counted else None

    def uplink_utilisation(self, topo_switch_roles: dict[str, str]) -> float:
        """Mean utilisation of the leaf→spine ports (the oversubscribed layer)."""
        values = [p.utilisation for p in self.ports if p.utilisation is not None
                  and topo_switch_roles.get(p.switch) == "leaf" and topo_switch_roles.get(p.peer) == "spine"]
        return float(np.mean(values)) if values else math.nan

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ScenarioResult:
    scenario: Scenario
    out_dir: Path
    runs: dict[str, ModeRun] = field(default_factory=dict)


def write_results(result: ScenarioResult) -> None:
    sc = result.scenario
    data = {"scenario": sc.name, "source": sc.source, "topology": sc.topology.name, "dataplane": sc.dataplane,
            "seed": sc.seed, "modes": {m: r.to_dict() for m, r in result.runs.items()}}
    (result.out_dir / "results.json").write_text(json.dumps(data, indent=1, default=str))
