"""Fault localisation, shortened: one trial of every fault kind (link down, 2-20% loss on one
direction, a port at half its capacity, a switch holding every frame 5 ms, a host whose ranks take
10-40 ms longer per piece) and one without a fault, on the default fabric under all-reduce load.
Every fault is pinned to its link, switch or host as the
top alert (the trial waits up to 20 s for it here, the evaluation 10 s: a test's margin on a busy
machine); the no-fault trial raises no alarm. On multi-GPU servers, the same for a GPU's NIC at half
rate, a slow GPU, a degraded NVLink and a rail's leaf holding frames, each named as the GPU node."""

from __future__ import annotations

import pytest

from lab.diagnose_eval import KINDS, SERVER_KINDS, evaluate, table
from topologies import railopt

pytestmark = [pytest.mark.mininet, pytest.mark.root]


def judge(trials, fig) -> None:
    """Every fault the top alert, no alarm without one."""
    print("\n" + table(fig))
    for t in trials:
        if t.truth:
            assert t.correct, f"trial {t.index} ({t.where}): top-1 {t.top1 or 'none'}, alerts {t.alerts}"
        else:
            assert t.alerts == [], f"no-fault trial {t.index}: alarms {t.alerts}"


def test_every_fault_kind_is_localised_and_a_quiet_fabric_raises_no_alarm():
    trials, fig, _ = evaluate(trials=len(KINDS), no_fault=1, seed=3, timeout_s=20.0,
                              say=lambda line: print(f"  {line}"))
    judge(trials, fig)


def test_on_multi_gpu_servers_the_nic_gpu_nvlink_and_rail_are_each_localised():
    trials, fig, _ = evaluate(trials=len(SERVER_KINDS), no_fault=1, seed=3, kinds=SERVER_KINDS, timeout_s=20.0,
                              say=lambda line: print(f"  {line}"), topo=railopt(servers=2, gpus=4, spines=2))
    judge(trials, fig)
