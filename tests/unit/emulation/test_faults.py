"""The one fault dispatcher: each kind goes through its channel (Mininet, the controller's API, a
switch's faults, a host's faults file), and a fault reads back from its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulation import faults, net
from emulation.faults import FAULT_KINDS, Fault, inject
from topologies import leafspine


class FakeProcess:
    def __init__(self, calls: list[tuple]) -> None:
        self.calls = calls

    def set_faults(self, delay_ms: float, rates: dict[int, float]) -> None:
        self.calls.append(("switch", delay_ms, rates))


class FakeSwitch:
    def __init__(self, calls: list[tuple]) -> None:
        self.process = FakeProcess(calls)


class FakeTestbed:
    """What emulation.net.Testbed offers the dispatcher: its topology, run directory, clock, Mininet
    link state and switch processes, recorded."""

    def __init__(self, run_dir: Path) -> None:
        self.topo = leafspine()
        self.run_dir = run_dir
        self.calls: list[tuple] = []
        self.switches = {s.name: FakeSwitch(self.calls) for s in self.topo.switches}
        self.switch_faults: dict[str, dict] = {}
        self.clock = 100.0

    def now(self) -> float:
        self.clock += 1
        return self.clock

    def set_link(self, a: str, b: str, up: bool) -> tuple[float, float]:
        self.calls.append(("link", a, b, up))
        began = self.now()
        return began, began + 0.5

    def set_nvlink_rate(self, gpu: str, mbps: float | None) -> float:
        self.calls.append(("nvlink", gpu, mbps))
        return self.now()


@pytest.fixture
def tb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTestbed:
    fake = FakeTestbed(tmp_path)
    monkeypatch.setattr(faults.adviceclient, "set_link_loss",
                        lambda run_dir, sender, receiver, percent: fake.calls.append(("loss", sender, receiver,
                                                                                       percent)))
    return fake


@pytest.mark.parametrize(("fault", "call"), [
    (Fault("link_down", ("s3", "s1")), ("link", "s3", "s1", False)),
    (Fault("link_up", ("s3", "s1")), ("link", "s3", "s1", True)),
    (Fault("loss", ("s1", "s4"), percent=2.5), ("loss", "s1", "s4", 2.5)),
    (Fault("rate", ("s3", "s1"), mbps=10), ("switch", 0.0, {5: 10})),
    (Fault("delay", ("s2", "s2"), delay_ms=5), ("switch", 5, {})),
])
def test_each_kind_goes_through_its_channel(tb: FakeTestbed, fault: Fault, call: tuple) -> None:
    injected = inject(tb, fault)  # type: ignore[arg-type]
    assert tb.calls == [call]
    assert injected.began == injected.settled == 101.0
    assert injected.in_effect == (101.5 if fault.kind.startswith("link") else 101.0)  # a carrier: when it changed


def test_a_switch_keeps_its_other_faults_and_a_rate_of_zero_restores_the_port(tb: FakeTestbed) -> None:
    inject(tb, Fault("rate", ("s3", "s1"), mbps=10))  # type: ignore[arg-type]
    inject(tb, Fault("delay", ("s3", "s3"), delay_ms=5))  # type: ignore[arg-type]
    inject(tb, Fault("rate", ("s3", "s1")))  # type: ignore[arg-type]
    assert tb.calls == [("switch", 0.0, {5: 10}), ("switch", 5, {5: 10}), ("switch", 5, {})]


def test_a_slow_host_is_written_to_its_faults_file(tb: FakeTestbed) -> None:
    inject(tb, Fault("delay", ("h3", "h3"), delay_ms=20))  # type: ignore[arg-type]
    assert json.loads((tb.run_dir / "hosts" / "h3.faults.json").read_text()) == {"compute_delay_ms": 20}
    assert tb.calls == []


def test_a_flap_says_when_it_began_and_when_the_link_last_came_back(tb: FakeTestbed) -> None:
    injected = inject(tb, Fault("flap", ("s4", "s2"), count=3, period_s=0.03))  # type: ignore[arg-type]
    assert tb.calls == [("link", "s4", "s2", False), ("link", "s4", "s2", True)] * 3
    assert (injected.began, injected.settled) == (101.0, 107.0)


@pytest.mark.parametrize(("fault", "message"), [
    (Fault("delay", ("x9", "x9"), delay_ms=5), "no switch or host 'x9'"),
    (Fault("delay", ("s2", "s2"), delay_ms=-1), "a delay must be >= 0 ms"),
    (Fault("delay", ("h2", "h2"), delay_ms=70_000), "within 0..60000 ms"),
    (Fault("rate", ("s3", "s4"), mbps=5), "s3.*s4"),
])
def test_a_fault_that_cannot_be_applied_is_refused(tb: FakeTestbed, fault: Fault, message: str) -> None:
    with pytest.raises((net.TestbedError, ValueError), match=message):
        inject(tb, fault)  # type: ignore[arg-type]
    assert tb.calls == []


@pytest.mark.parametrize("fault", [
    Fault("loss", ("s1", "s4"), percent=2.5), Fault("flap", ("s4", "s2"), count=10, period_s=0.5),
    Fault("rate", ("s3", "s1"), mbps=10), Fault("delay", ("h3", "h3"), delay_ms=0), Fault("link_down", ("s3", "s1")),
])
def test_a_fault_reads_back_from_its_record(fault: Fault) -> None:
    assert fault.kind in FAULT_KINDS
    assert Fault.from_record({"at_s": 1.0, **fault.record(), "time": 5.0}) == fault
    assert fault.describe()


def test_a_rate_on_a_gpus_nvlink_shapes_it_either_way_round_and_zero_restores_it(tmp_path: Path) -> None:
    from topologies import railopt

    tb = FakeTestbed(tmp_path)
    tb.topo = railopt(servers=2, gpus=2, spines=1)
    inject(tb, Fault("rate", ("h3", "srv2"), mbps=20))  # type: ignore[arg-type]
    inject(tb, Fault("rate", ("srv2", "h3")))  # type: ignore[arg-type]
    assert tb.calls == [("nvlink", "h3", 20), ("nvlink", "h3", None)]
