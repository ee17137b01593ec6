"""The default leaf-spine on BMv2 (simple_switch_grpc running p4c's output): reachability, ECMP over
both spines and the drop counters, all read over P4Runtime (BMv2 writes no stats file). Skipped with
the reason where BMv2 and p4c are absent."""

from __future__ import annotations

import pytest

from emulation.net import Testbed
from emulation.p4read import drop_reasons, read_counter
from tests.integration.helpers import send_udp, unreachable_pairs, wait_until
from topologies import leafspine
from wire.drops import DROP_REASONS

pytestmark = [pytest.mark.mininet, pytest.mark.root]

FLOWS = 16  # source ports: P(all on one spine) = 2^-15 whatever BMv2's selector hash is
PER_FLOW = 20


@pytest.fixture(scope="module")
def fabric():
    from emulation.switchproc import bmv2_missing

    if bmv2_missing():
        pytest.skip(f"{' and '.join(bmv2_missing())} not found: BMv2 runs where p4lang's packages are installed")
    with Testbed(leafspine(), dataplane="bmv2", name="test-leafspine-bmv2") as tb:
        yield tb


def tx_total(tb: Testbed, switch: str) -> int:
    sw = tb.switches[switch]
    schema = tb.schema_of(switch)
    return sum(p for p, _ in read_counter(sw.grpc_address, sw.device_id, schema.id_of("StarEgress.port_tx")).values())


def test_every_host_reaches_every_other(fabric):
    assert unreachable_pairs(fabric.net) == []


def test_ecmp_spreads_flows_over_both_spines(fabric):
    h1, h5 = fabric.host("h1"), fabric.host("h5")
    before = {s: tx_total(fabric, s) for s in ("s1", "s2")}
    for sport in range(21000, 21000 + FLOWS):
        send_udp(h1, h5.IP(), sport, PER_FLOW)
    assert wait_until(lambda: sum(tx_total(fabric, s) - before[s] for s in ("s1", "s2")) >= FLOWS * PER_FLOW, 10.0)
    moved = {s: tx_total(fabric, s) - before[s] for s in ("s1", "s2")}
    assert all(m >= PER_FLOW for m in moved.values()), f"spine tx over {FLOWS} flows: {moved}"


def test_drop_reasons_are_read_over_p4runtime(fabric):
    """An unrouted destination is counted as no_route in the program's drop_reason counter."""
    sw = fabric.switches["s3"]
    schema = fabric.schema_of("s3")
    before = drop_reasons(sw.grpc_address, sw.device_id, schema)
    assert set(before) == set(DROP_REASONS)
    send_udp(fabric.host("h1"), "10.99.0.1", 22000, 10)  # no route anywhere in the fabric
    assert wait_until(lambda: drop_reasons(sw.grpc_address, sw.device_id, schema)["no_route"][0]
                      >= before["no_route"][0] + 10, 10.0)
