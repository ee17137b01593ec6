"""fattree(4): 20 soft switches, 16 hosts, every pair reachable through the fabric."""

from __future__ import annotations

import pytest

from emulation.net import Testbed
from tests.integration.helpers import links_named, unreachable_pairs
from topologies import fattree

pytestmark = [pytest.mark.mininet, pytest.mark.root]


def test_fattree4_every_host_reaches_every_other():
    topo = fattree(4)
    assert (len(topo.switches), len(topo.hosts)) == (20, 16)
    with Testbed(topo, dataplane="soft", name="test-fattree") as tb:
        assert unreachable_pairs(tb.net) == []
    assert links_named(tuple(f"{s.name}-" for s in topo.switches)) == []
