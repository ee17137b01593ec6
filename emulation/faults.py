"""Faults injected into a running testbed, through one typed interface.

A `Fault` says what breaks, where and how much; `inject(tb, fault)` applies it through the channel
its kind needs — netlink for a link's carrier (link_down, link_up, flap: both ends, a cut cable), the
controller's API for loss (it writes the receiving switch's fault_inject, so its probes see it too),
the switch's faults file for rate and a switch's delay, the host's faults file for a host's delay —
says when it began, and adds it to the run's faults.csv. Scenarios (lab/scenario.py), the
localisation evaluation and the CLI all inject through here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc

from emulation.net import Testbed, TestbedError
from wire import adviceclient, faultsfile, runfiles

FAULT_KINDS = ("link_down", "link_up", "loss", "flap", "rate", "delay")


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    link: tuple[str, str]  # loss: (sender, receiver); rate: (switch, neighbour) or (GPU, server); delay: (node, node)
    percent: float = 0.0  # loss: share of the sender's frames lost (0 clears)
    count: int = 0  # flap: down-up cycles
    period_s: float = 0.0  # flap: one cycle (down for half of it)
    mbps: float = 0.0  # rate: the port's drain rate (0 restores its own)
    delay_ms: float = 0.0  # delay: a switch holds every frame, a host's ranks every piece this long (0 clears)

    def describe(self) -> str:
        a, b = self.link
        if self.kind == "loss":
            return f"loss {self.percent:g}% of frames {a} -> {b}" if self.percent else f"loss {a} -> {b} cleared"
        if self.kind == "rate":
            return f"rate {a} -> {b} {self.mbps:g} Mbit/s" if self.mbps else f"rate {a} -> {b} restored"
        if self.kind == "delay":
            return f"delay {a} {self.delay_ms:g} ms" if self.delay_ms else f"delay {a} cleared"
        if self.kind == "flap":
            return f"flap {a}-{b} {self.count} times, every {self.period_s:g} s"
        return f"{self.kind} {a}-{b}"

    @classmethod
    def from_record(cls, record: dict) -> Fault:
        """The fault a results.json record (record()) describes."""
        figures = {k: v for k, v in record.items() if k in ("percent", "count", "period_s", "mbps", "delay_ms")}
        return cls(record["kind"], (record["link"][0], record["link"][1]), **figures)

    def record(self) -> dict:
        """The fault as results.json keeps it: kind, link and the figures its kind has."""
        figures = {"loss": ("percent",), "flap": ("count", "period_s"), "rate": ("mbps",),
                   "delay": ("delay_ms",)}.get(self.kind, ())
        return {"kind": self.kind, "link": list(self.link), **{name: getattr(self, name) for name in figures}}


@dataclass(frozen=True)
class Injected:
    began: float  # wall time the first change began (the onset)
    settled: float  # wall time the last change began (a flap's last return; `began` for one change)
    carrier: float | None = None  # link_down, link_up: wall time the kernel had changed the carrier by

    @property
    def in_effect(self) -> float:
        """Wall time the fault was in place by: the carrier's change for a link (the kernel can take
        hundreds of ms to close an interface on a busy machine), else its onset."""
        return self.began if self.carrier is None else self.carrier


def inject(tb: Testbed, fault: Fault) -> Injected:
    """Apply `fault` on `tb`; TestbedError (or TopologyError for a link that is not there) when it
    cannot be applied, with nothing changed. Each fault applied is added to the run's faults.csv
    (the live page's timeline and its replay)."""
    injected = _apply(tb, fault)
    runfiles.append_fault(tb.run_dir, runfiles.FaultRecord(injected.began, injected.settled, fault.kind,
                                                           *fault.link, fault.record(), fault.describe()))
    return injected


def _apply(tb: Testbed, fault: Fault) -> Injected:
    a, b = fault.link
    if fault.kind in ("link_down", "link_up"):
        at, carrier = tb.set_link(a, b, up=fault.kind == "link_up")
        return Injected(at, at, carrier)
    if fault.kind == "flap":
        began = tb.now()
        ups = _flap(tb, a, b, fault.count, fault.period_s)
        return Injected(began, ups[-1] if ups else began)
    if fault.kind == "loss":
        at = _loss(tb, a, b, fault.percent)
    elif fault.kind == "rate" and tb.topo.is_nvlink(a, b):  # a degraded NVLink: (GPU, server) either way round
        at = tb.set_nvlink_rate(a if tb.topo.is_host(a) else b, fault.mbps or None)
    elif fault.kind == "rate":
        at = _switch_faults(tb, a, rates={b: fault.mbps or None})
    elif fault.kind == "delay" and tb.topo.is_host(a):
        at = _host_delay(tb, a, fault.delay_ms)
    elif fault.kind == "delay":
        if not tb.topo.is_switch(a):
            raise TestbedError(f"no switch or host {a!r} in {tb.topo.name}")
        at = _switch_faults(tb, a, delay_ms=fault.delay_ms)
    else:
        raise TestbedError(f"unknown fault kind {fault.kind!r} (one of {', '.join(FAULT_KINDS)})")
    return Injected(at, at)


def _flap(tb: Testbed, a: str, b: str, count: int, period_s: float) -> list[float]:
    """The link a–b down and up `count` times, down for half of every `period_s`; the wall times it
    came back up."""
    ups = []
    start = time.monotonic()
    for i in range(count):
        tb.set_link(a, b, up=False)
        time.sleep(max(0.0, start + (i + 0.5) * period_s - time.monotonic()))
        ups.append(tb.set_link(a, b, up=True)[0])
        time.sleep(max(0.0, start + (i + 1) * period_s - time.monotonic()))
    return ups


def _loss(tb: Testbed, sender: str, receiver: str, percent: float) -> float:
    """`percent` of the frames sender → receiver lost (0 clears), through the controller (it writes
    the receiving switch's fault_inject); the wall time the request was made."""
    began = tb.now()
    try:
        adviceclient.set_link_loss(tb.run_dir, sender, receiver, percent)
    except grpc.RpcError as exc:
        raise TestbedError(f"{sender} -> {receiver}: {exc.details()}") from None
    return began


def _switch_faults(tb: Testbed, switch: str, delay_ms: float | None = None,
                   rates: dict[str, float | None] | None = None) -> float:
    """A switch's faults file: delay_ms holds every frame it forwards that long (a slow switch; 0
    clears); rates {neighbour: Mbit/s} drains its port toward that neighbour at that rate (a port
    running below its capacity; None restores it). The wall time it was written."""
    if not tb.topo.is_switch(switch):
        raise TestbedError(f"no switch {switch!r} in {tb.topo.name}")
    state = tb.switch_faults.setdefault(switch, {"delay_ms": 0.0, "rates": {}})
    if delay_ms is not None:
        if delay_ms < 0:
            raise TestbedError(f"{switch}: a delay must be >= 0 ms, got {delay_ms:g}")
        state["delay_ms"] = delay_ms
    for neighbour, mbps in (rates or {}).items():
        try:
            port = tb.topo.find_link(switch, neighbour).port_of(switch)
        except ValueError as exc:
            raise TestbedError(str(exc)) from None
        if mbps is None:
            state["rates"].pop(port, None)
        elif mbps <= 0:
            raise TestbedError(f"{switch} -> {neighbour}: a rate must be > 0 Mbit/s, got {mbps:g}")
        else:
            state["rates"][port] = mbps
    began = tb.now()
    try:
        tb.switches[switch].process.set_faults(state["delay_ms"], dict(state["rates"]))
    except NotImplementedError as exc:
        raise TestbedError(f"{switch}: {exc}") from None
    return began


def _host_delay(tb: Testbed, host: str, compute_delay_ms: float) -> float:
    """A slow host: every all-reduce rank on `host` takes compute_delay_ms longer over each piece it
    reduces or copies (a straggling GPU; 0 clears), through the host's faults file, which running
    ranks follow within 0.1 s. The wall time it was written."""
    if not 0 <= compute_delay_ms <= 60_000:
        raise TestbedError(f"{host}: a compute delay must be within 0..60000 ms, got {compute_delay_ms:g}")
    began = tb.now()
    faultsfile.write(faultsfile.path_of(tb.run_dir, host, "hosts"), {"compute_delay_ms": compute_delay_ms})
    return began
