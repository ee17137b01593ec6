"""Injected faults the controller owns (it is the one writer of every switch's tables): frame loss on
one direction of a fabric link, as fault_inject entries on the receiving switch that match the
link's ingress port with the IPv4 fields wildcarded, so data and probes alike are lost. And the
checks on the evidence hosts bring the fault localiser: the ranks' step reports.
"""

from __future__ import annotations

import math

from controller import entities as ent
from topologies.spec import Topology, TopologyError
from wire import advice_pb2 as pb
from wire.p4info import P4Schema
from wire.proto import p4r

TABLE = "StarIngress.fault_inject"
PRIORITY = 10
PROB_STEPS = 65536  # fault_drop_prob's prob_u16 is a probability in 1/65536 steps


class FaultError(ValueError):
    """A fault request that names no such link or an impossible value; the message names the field."""


def loss_step(percent: float) -> int:
    """prob_u16 for `percent` (65536 = every frame: fault_drop)."""
    return PROB_STEPS if percent >= 100 else min(PROB_STEPS - 1, round(percent / 100 * PROB_STEPS))


class LinkLoss:
    """The loss in force per (receiving switch, its port on the link), and the writes that set it."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.steps: dict[tuple[str, int], int] = {}

    def where(self, sender: str, receiver: str) -> tuple[str, int]:
        """(receiving switch, its port on the link); the sender may be a host or a switch."""
        if not (self.topo.is_switch(sender) or self.topo.is_host(sender)):
            raise FaultError(f"LinkLossRequest.sender: no node {sender!r}")
        if not self.topo.is_switch(receiver):
            raise FaultError(f"LinkLossRequest.receiver: no switch {receiver!r} (the loss is injected where "
                             f"frames arrive, so the receiving end must be a switch)")
        try:
            link = self.topo.find_link(sender, receiver)
        except TopologyError:
            raise FaultError(f"LinkLossRequest: no link between {sender} and {receiver}") from None
        return receiver, link.port_of(receiver)

    def set(self, schema: P4Schema, sender: str, receiver: str, percent: float) -> tuple[float, list[p4r.Update]]:
        """(the loss as installed in percent, the updates for the receiving switch)."""
        if not 0 <= percent <= 100:
            raise FaultError(f"LinkLossRequest.percent: {percent:g} is not within 0..100")
        key = self.where(sender, receiver)
        step = loss_step(percent) if percent > 0 else 0
        old = self.steps.get(key, 0)
        if step == old:
            return step * 100 / PROB_STEPS, []
        if step:
            self.steps[key] = step
        else:
            del self.steps[key]
        entry = self._entry(schema, key[1], step or old)
        kind = ent.delete if not step else ent.insert if not old else ent.modify
        return step * 100 / PROB_STEPS, [kind(entry)]

    def restore(self, schema: P4Schema, switch: str) -> list[p4r.Update]:
        """A reprogrammed switch's loss entries, written anew."""
        return [ent.insert(self._entry(schema, port, step)) for (name, port), step in sorted(self.steps.items())
                if name == switch]

    @staticmethod
    def _entry(schema: P4Schema, port: int, step: int) -> p4r.TableEntry:
        action = (ent.action(schema, "StarIngress.fault_drop") if step >= PROB_STEPS
                  else ent.action(schema, "StarIngress.fault_drop_prob", prob_u16=step))
        return ent.table_entry(schema, TABLE, {"standard_metadata.ingress_port": (port, 0x1FF)},
                               action_call=action, priority=PRIORITY)


def step_work(report: pb.StepReport, host_by_ip: dict[str, str]) -> tuple[str, list[float]]:
    """The reporting host's name and its ranks' own work on each received piece (seconds)."""
    host = host_by_ip.get(report.host)
    if host is None:
        raise FaultError(f"StepReport.host: no host has the address {report.host!r}")
    for i, step in enumerate(report.steps):
        for name in ("duration_s", "compute_s", "start_s"):
            value = getattr(step, name)
            if not math.isfinite(value) or value < 0:
                raise FaultError(f"StepReport.steps[{i}].{name}: must be a finite number >= 0, got {value!r}")
    return host, [step.compute_s for step in report.steps if not step.send]
