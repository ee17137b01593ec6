"""Faults injected into a running testbed, through one typed interface.

A `Fault` says what breaks, where and how much; `inject(tb, fault)` applies it through the channel
its kind needs — Mininet for a link's carrier (link_down, link_up, flap: both ends, a cut cable), the
controller's API for loss (it writes the receiving switch's fault_inject, so its probes see it too),
the switch's faults file for rate and a switch's delay, the host's faults file for a host's delay —
and says when it began. Scenarios (lab/scenario.py), the localisation evaluation and the CLI all
inject through here.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulation.net import Testbed, TestbedError

FAULT_KINDS = ("link_down", "link_up", "loss", "flap", "rate", "delay")


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    link: tuple[str, str]  # loss: (sender, receiver); rate: (switch, neighbour); delay: (node, node)
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


def inject(tb: Testbed, fault: Fault) -> Injected:
    """Apply `fault` on `tb`; TestbedError (or TopologyError for a link that is not there) when it
    cannot be applied, with nothing changed."""
    a, b = fault.link
    if fault.kind in ("link_down", "link_up"):
        at = tb.set_link(a, b, up=fault.kind == "link_up")
        return Injected(at, at)
    if fault.kind == "flap":
        began = tb.now()
        ups = tb.flap_link(a, b, fault.count, fault.period_s)
        return Injected(began, ups[-1] if ups else began)
    if fault.kind == "loss":
        at = tb.set_link_loss(a, b, fault.percent)
    elif fault.kind == "rate":
        at = tb.set_switch_faults(a, rates={b: fault.mbps or None})
    elif fault.kind == "delay" and tb.topo.is_host(a):
        at = tb.set_host_faults(a, fault.delay_ms)
    elif fault.kind == "delay":
        if not tb.topo.is_switch(a):
            raise TestbedError(f"no switch or host {a!r} in {tb.topo.name}")
        at = tb.set_switch_faults(a, delay_ms=fault.delay_ms)
    else:
        raise TestbedError(f"unknown fault kind {fault.kind!r} (one of {', '.join(FAULT_KINDS)})")
    return Injected(at, at)
