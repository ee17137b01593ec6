"""Flow workloads without Mininet: seeded schedules, and incast and background jobs of agent processes
over loopback — every byte acknowledged, every flow timed, results written."""

from __future__ import annotations

import csv
import json

import pytest

from workloads.flows.job import run_flows
from workloads.flows.schedule import background, hedera, incast, log_uniform_mean, nonblocking_rates
from workloads.hosts import JobError

HOSTS = ["a", "b", "c", "d"]


def test_incast_sends_from_every_sender_at_once_and_refuses_bad_lists():
    flows = incast("r", ["a", "b", "c"], 1000)
    assert [(f.src, f.dst, f.start_s, f.size_bytes) for f in flows] == [(s, "r", 0.0, 1000) for s in "abc"]
    assert len({f.id for f in flows}) == 3
    for senders, size, what in ((["a", "r"], 10, "receiver"), (["a", "a"], 10, "twice"), ([], 10, "at least"),
                                (["a"], 0, "size")):
        with pytest.raises(ValueError, match=what):
            incast("r", senders, size)


def test_hederas_patterns_send_one_flow_from_every_host_where_the_pattern_says():
    """On a k=4 fat-tree's layout (2 hosts per edge, 2 edges per pod, 4 pods)."""
    hosts = [f"h{i}" for i in range(1, 17)]
    edge = {h: f"e{(i - 1) // 2}" for i, h in enumerate(hosts, 1)}
    pod = {h: f"p{(i - 1) // 4}" for i, h in enumerate(hosts, 1)}
    stride = hedera("stride", hosts, edge, pod, 1000, seed=1, stride=4)
    assert [(f.src, f.dst) for f in stride[:2]] == [("h1", "h5"), ("h2", "h6")] and stride[-1].dst == "h4"
    perm = hedera("random", hosts, edge, pod, 1000, seed=3)
    assert sorted(f.dst for f in perm) == sorted(hosts) and all(f.src != f.dst for f in perm)
    assert perm == hedera("random", hosts, edge, pod, 1000, seed=3)  # a function of its seed
    where = {"edge": 0, "pod": 0, "other": 0}
    for seed in range(50):
        for f in hedera("staggered", hosts, edge, pod, 1000, seed=seed, p_edge=0.5, p_pod=0.3):
            assert f.src != f.dst and f.start_s == 0 and f.size_bytes == 1000
            where["edge" if edge[f.src] == edge[f.dst] else "pod" if pod[f.src] == pod[f.dst] else "other"] += 1
    # 800 draws: 0.5 / 0.3 / 0.2 ± 5 sd
    assert abs(where["edge"] - 400) < 71 and abs(where["pod"] - 240) < 65 and abs(where["other"] - 160) < 57, where
    with pytest.raises(ValueError, match="stride: 16 is a multiple"):
        hedera("stride", hosts, edge, pod, 1000, seed=1, stride=16)
    with pytest.raises(ValueError, match="pattern: 'ring' is not one of"):
        hedera("ring", hosts, edge, pod, 1000, seed=1)


def test_the_nonblocking_ideal_shares_a_host_only_where_flows_meet_at_it():
    # a permutation: every flow at its NIC rate
    assert nonblocking_rates([("h1", "h2"), ("h2", "h3"), ("h3", "h1")], 10.0) == pytest.approx([10, 10, 10])
    # two flows into h3 share its NIC; h1's flow to h4 is not held back by it
    rates = nonblocking_rates([("h1", "h3"), ("h2", "h3"), ("h4", "h1")], 10.0)
    assert rates == pytest.approx([5, 5, 10])


def test_background_is_a_function_of_its_seed_and_offers_the_load_asked_for():
    one = background(HOSTS, 5.0, 0.3, 20.0, seed=7)
    assert one == background(HOSTS, 5.0, 0.3, 20.0, seed=7)
    assert one != background(HOSTS, 5.0, 0.3, 20.0, seed=8)
    assert all(f.src != f.dst and 0 <= f.start_s < 5.0 and 16 << 10 <= f.size_bytes <= 2 << 20 for f in one)
    assert [f.id for f in one] == list(range(len(one)))
    long = background(HOSTS, 2000.0, 0.3, 20.0, seed=1)  # many arrivals: the mean holds within a few %
    offered_mbps = sum(f.size_bytes for f in long) * 8 / 1e6 / 2000.0 / len(HOSTS)
    assert offered_mbps == pytest.approx(0.3 * 20.0, rel=0.1)
    assert log_uniform_mean(100, 100) == 100 and log_uniform_mean(1, 1000) == pytest.approx(999 / 6.907755, rel=1e-6)
    for kwargs, what in (({"load": 0}, "load"), ({"load": 1.5}, "load"), ({"seconds": 0}, "seconds")):
        args = {"hosts": HOSTS, "seconds": 1.0, "load": 0.3, "link_mbps": 20.0, "seed": 1, **kwargs}
        with pytest.raises(ValueError, match=what):
            background(**args)


def test_an_incast_over_loopback_delivers_every_byte_and_times_every_flow(tmp_path):
    flows = incast("r", ["a", "b", "c"], 300_001)  # not a multiple of the agents' 64 KiB blocks
    outcome = run_flows(flows, name="inc", kind="incast", local=True, progress=None, workdir=tmp_path)
    assert outcome.completed == 3 and not outcome.failed
    for f in outcome.flows:
        assert f.received_bytes == 300_001 and f.fct_s > 0 and f.goodput_mbps > 0
        assert f.started >= outcome.t0 - 0.01  # no flow starts before its time
    assert "3 of 3 senders -> r" in outcome.table and "Jain fairness" in outcome.table
    rows = list(csv.DictReader((tmp_path / "flows.csv").open()))
    assert len(rows) == 3 and all(r["ok"] == "True" for r in rows)
    assert json.loads((tmp_path / "results.json").read_text())["completed"] == 3


def test_background_flows_over_loopback_start_on_schedule_and_all_complete(tmp_path):
    flows = background(["a", "b", "c"], 1.5, 0.2, 200.0, seed=3, min_bytes=4 << 10, max_bytes=256 << 10)
    assert len(flows) >= 10
    outcome = run_flows(flows, name="bg", kind="background", local=True, progress=None, workdir=tmp_path)
    assert outcome.completed == len(flows), [f.error for f in outcome.failed]
    late = [f for f in outcome.flows if f.started - (outcome.t0 + f.start_s) > 0.5]
    assert not late, f"{len(late)} flows started > 0.5 s after their time"
    assert f"{len(flows)} of {len(flows)} flows completed on 3 hosts" in outcome.table


def test_no_flows_is_an_error_that_says_so(tmp_path):
    with pytest.raises(JobError, match="no flows"):
        run_flows([], local=True, progress=None, workdir=tmp_path)
