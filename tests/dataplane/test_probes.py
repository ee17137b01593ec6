"""A soft switch sends its own link probes when its device config asks (wire/probes.py).

Soft switch only: BMv2 gets its probes from the controller as packet-outs, which
test_forwarding.py's packet-out and probe tests cover on both targets.
"""

from __future__ import annotations

import statistics
import time

import grpc
import pytest
from scapy.layers.l2 import Ether

from tests.dataplane.harness import SwitchHarness
from wire.cpu import ETHERTYPE_PROBE, REASON_PROBE
from wire.probes import device_config, parse_probe

pytestmark = [pytest.mark.root]

PERIOD_S = 0.02
MACS = {2: "02:53:00:00:00:02", 3: "02:53:00:00:00:03"}


@pytest.fixture(scope="module")
def switch():
    with SwitchHarness("soft", ports=3) as h:
        yield h


def reconcile(h: SwitchHarness, config: bytes) -> None:
    """The running pipeline with a new device config (RECONCILE_AND_COMMIT keeps the tables)."""
    h.session.call(h.session.s.set_pipeline(config, keep_state=True))


def is_probe(frame: bytes) -> bool:
    return frame[12:14] == ETHERTYPE_PROBE.to_bytes(2, "big")


def test_probes_leave_every_configured_port_on_the_period_stamped_with_the_clock(switch):
    start = time.monotonic()
    reconcile(switch, device_config(PERIOD_S, MACS))
    try:
        got = switch.receive_many([1, 2, 3], is_probe, count=40, timeout_s=10.0)
        end = time.monotonic()
    finally:
        reconcile(switch, b"")
    assert got[1] == [], "a probe left a port the config did not name"
    for port in (2, 3):
        probes = [parse_probe(frame) for frame in got[port]]
        assert len(probes) >= 10, f"port {port}: {len(probes)} probes"
        assert {(p[0], p[1]) for p in probes} == {(1, port)}, probes[:3]
        assert all(frame[6:12] == bytes.fromhex(MACS[port].replace(":", "")) for frame in got[port])
        sent = [p[2] for p in probes]
        assert start <= sent[0] and sent[-1] <= end and sent == sorted(sent)
        gap = statistics.median(b - a for a, b in zip(sent, sent[1:], strict=False))
        assert 0.5 * PERIOD_S <= gap <= 1.5 * PERIOD_S, f"port {port}: probes {gap * 1000:.1f} ms apart"


def test_an_empty_device_config_stops_them(switch):
    reconcile(switch, device_config(PERIOD_S, MACS))
    reconcile(switch, b"")
    switch.receive_many([2, 3], is_probe, count=1000, timeout_s=0.3)  # any already on their way
    assert switch.receive_many([2, 3], is_probe, count=1, timeout_s=0.5) == {2: [], 3: []}


def test_while_it_sends_probes_those_it_receives_reach_the_controller_within_a_period(switch):
    reconcile(switch, device_config(0.2, MACS))
    try:
        while switch.session.packet_in(timeout_s=0.05) is not None:
            pass
        probe = bytes(Ether(src="02:00:00:00:0d:01", dst="ff:ff:ff:ff:ff:ff", type=ETHERTYPE_PROBE) / (b"\x5c" * 46))
        sent = time.monotonic()
        switch.send(1, probe)
        packet = switch.session.packet_in(timeout_s=3.0)
        waited = time.monotonic() - sent
    finally:
        reconcile(switch, b"")
    assert packet is not None, "the probe never reached the controller"
    fields = switch.session.s.packet_in_fields(packet)
    assert (fields["ingress_port"], fields["reason"]) == (1, REASON_PROBE)
    assert packet.payload[:len(probe)] == probe
    assert waited <= 0.2 + 1.0, f"held {waited:.2f} s: more than a period (0.2 s) and a busy machine's second"


@pytest.mark.parametrize(("config", "names"), [
    (b"{not json", "not JSON"),
    (b'{"probes": {"period_ms": 0, "ports": {}}}', "probes.period_ms"),
    (b'{"probes": {"period_ms": 50, "ports": {"2": "zz"}}}', "probes.ports[2]"),
    (b'{"probes": {"period_ms": 50, "ports": {"9": "02:00:00:00:00:09"}}}', "no port 9"),
    (b'{"probes": {"period_ms": 50}}', "'period_ms' and 'ports'"),
])
def test_a_bad_device_config_is_invalid_argument_naming_the_field_and_changes_nothing(switch, config, names):
    switch.drain()  # probes earlier tests left in the hosts' sockets
    with pytest.raises(grpc.RpcError) as failed:
        reconcile(switch, config)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert names in failed.value.details()
    assert switch.receive_many([1, 2, 3], is_probe, count=1, timeout_s=0.2) == {1: [], 2: [], 3: []}
