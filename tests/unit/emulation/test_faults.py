"""The one fault dispatcher: each kind goes through its channel, and a fault reads back from its record."""

from __future__ import annotations

import pytest

from emulation import net
from emulation.faults import FAULT_KINDS, Fault, inject
from topologies import leafspine


class FakeTestbed:
    """The channels of emulation.net.Testbed, recorded."""

    def __init__(self) -> None:
        self.topo = leafspine()
        self.calls: list[tuple] = []
        self.clock = 100.0

    def now(self) -> float:
        self.clock += 1
        return self.clock

    def set_link(self, a: str, b: str, up: bool) -> float:
        self.calls.append(("link", a, b, up))
        return self.now()

    def flap_link(self, a: str, b: str, count: int, period_s: float) -> list[float]:
        self.calls.append(("flap", a, b, count, period_s))
        return [self.now() for _ in range(count)]

    def set_link_loss(self, sender: str, receiver: str, percent: float) -> float:
        self.calls.append(("loss", sender, receiver, percent))
        return self.now()

    def set_switch_faults(self, switch: str, delay_ms: float | None = None,
                          rates: dict[str, float | None] | None = None) -> float:
        self.calls.append(("switch", switch, delay_ms, rates))
        return self.now()

    def set_host_faults(self, host: str, delay_ms: float) -> float:
        self.calls.append(("host", host, delay_ms))
        return self.now()


@pytest.mark.parametrize(("fault", "call"), [
    (Fault("link_down", ("s3", "s1")), ("link", "s3", "s1", False)),
    (Fault("link_up", ("s3", "s1")), ("link", "s3", "s1", True)),
    (Fault("loss", ("s1", "s4"), percent=2.5), ("loss", "s1", "s4", 2.5)),
    (Fault("rate", ("s3", "s1"), mbps=10), ("switch", "s3", None, {"s1": 10})),
    (Fault("rate", ("s3", "s1")), ("switch", "s3", None, {"s1": None})),
    (Fault("delay", ("s2", "s2"), delay_ms=5), ("switch", "s2", 5, None)),
    (Fault("delay", ("h3", "h3"), delay_ms=20), ("host", "h3", 20)),
])
def test_each_kind_goes_through_its_channel(fault: Fault, call: tuple) -> None:
    tb = FakeTestbed()
    injected = inject(tb, fault)  # type: ignore[arg-type]
    assert tb.calls == [call]
    assert injected.began == injected.settled == 101.0


def test_a_flap_says_when_it_began_and_when_the_link_last_came_back() -> None:
    tb = FakeTestbed()
    injected = inject(tb, Fault("flap", ("s4", "s2"), count=3, period_s=0.5))  # type: ignore[arg-type]
    assert tb.calls == [("flap", "s4", "s2", 3, 0.5)]
    assert (injected.began, injected.settled) == (101.0, 104.0)


def test_a_delay_on_a_node_that_is_not_there_is_refused() -> None:
    with pytest.raises(net.TestbedError, match="no switch or host 'x9'"):
        inject(FakeTestbed(), Fault("delay", ("x9", "x9"), delay_ms=5))  # type: ignore[arg-type]


@pytest.mark.parametrize("fault", [
    Fault("loss", ("s1", "s4"), percent=2.5), Fault("flap", ("s4", "s2"), count=10, period_s=0.5),
    Fault("rate", ("s3", "s1"), mbps=10), Fault("delay", ("h3", "h3"), delay_ms=0), Fault("link_down", ("s3", "s1")),
])
def test_a_fault_reads_back_from_its_record(fault: Fault) -> None:
    assert fault.kind in FAULT_KINDS
    assert Fault.from_record({"at_s": 1.0, **fault.record(), "time": 5.0}) == fault
    assert fault.describe()
