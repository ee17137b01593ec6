"""Proactive rate advice on the default fabric on BMv2 (simple_switch_grpc running p4c's output):
the incast 6→1 with and without advice, as test_advice.py checks it on the soft switch. Skipped
with the reason where BMv2 and p4c are absent."""

from __future__ import annotations

import pytest

from emulation.net import Testbed
from tests.integration.incast_check import check_incast_advice_vs_none
from topologies import leafspine

pytestmark = [pytest.mark.mininet, pytest.mark.root]


@pytest.fixture(scope="module")
def fabric():
    from emulation.switchproc import bmv2_missing

    if bmv2_missing():
        pytest.skip(f"{' and '.join(bmv2_missing())} not found: BMv2 runs where p4lang's packages are installed")
    with Testbed(leafspine(), dataplane="bmv2", name="test-advice-bmv2", mode="advice") as tb:
        yield tb


def test_incast_with_advice_on_bmv2_has_no_queue_and_fair_shares_then_without_it(fabric):
    check_incast_advice_vs_none(fabric)
