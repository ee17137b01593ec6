"""Several workloads at once on the default fabric (advice mode): two all-reduce tenants sharing the
spines, an incast and background flows run side by side; every all-reduce result is exact, every
flow is delivered in full, and they really overlapped in time."""

from __future__ import annotations

import json

import pytest

from emulation.net import Testbed
from topologies import leafspine
from workloads.allreduce.job import JobOutcome, JobSpec
from workloads.allreduce.job import background as allreduce_job
from workloads.fabric import FabricView
from workloads.flows.job import FlowOutcome, background_job
from workloads.flows.schedule import background, incast

pytestmark = [pytest.mark.mininet, pytest.mark.root]
ALL = [f"h{i}" for i in range(1, 9)]
JOB_CEILING_S = 300  # each job takes ~10 s here; the ceiling is for a loaded machine


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(), dataplane="soft", name="test-workloads", mode="advice") as tb:
        yield tb


def span_of_allreduce(outcome: JobOutcome) -> tuple[float, float]:
    """CLOCK_MONOTONIC interval of the whole job, over every rank: from its launch (the job's elapsed
    time, results.json, back from the last step's end; early by the time its results took to gather)
    to the last step's end. Not the timed iterations alone: the ranks' launch, rendezvous and warm-up
    iteration came first — 52 of a job's 60 s in a test-repeat on a loaded machine, so its timed
    iterations began after the 35 s of background arrivals while the job had run beside them."""
    steps = [s for r in outcome.results for s in r.steps]
    end = max(s[6] for s in steps)
    elapsed = json.loads((outcome.workdir / "results.json").read_text())["elapsed_s"]
    return end - elapsed, end


def span_of_flows(outcome: FlowOutcome) -> tuple[float, float]:
    return min(f.started for f in outcome.flows), max(f.ended for f in outcome.flows)


def test_two_tenants_an_incast_and_background_flows_at_once(fabric):
    view = FabricView.of_testbed(fabric)
    jobs = [
        allreduce_job(JobSpec(hosts=["h1", "h2", "h5", "h6"], sizes=[2 << 20], algo="ring", iters=2,
                              name="tenant-a"), view),
        allreduce_job(JobSpec(hosts=["h3", "h4", "h7", "h8"], sizes=[2 << 20], algo="hd", iters=2,
                              name="tenant-b"), view),
        background_job("incast", incast("h5", ["h1", "h3", "h4", "h7"], 1 << 20), view, "incast"),
        # Arrivals over 35 s, longer than the other jobs take, so the background covers them (over 12 s,
        # a ring's first iteration slowed by an ECMP collision and the incast once ended after it; over
        # 20 s, a ring's last iteration began after it on a machine that stalled for seconds at a time).
        background_job("background", background(ALL, 35.0, 0.15, 20.0, seed=5), view, "background"),
    ]
    for job in jobs:
        job.start()
    for job in jobs:
        assert job.wait(JOB_CEILING_S), f"{job.name} still running after {JOB_CEILING_S} s: {job.describe()}"
    for job in jobs:
        print("\n" + job.describe(full=True))
    assert [job.error for job in jobs] == [None] * 4
    tenant_a, tenant_b, inc, bg = (job.outcome for job in jobs)
    assert isinstance(tenant_a, JobOutcome) and isinstance(tenant_b, JobOutcome)
    assert isinstance(inc, FlowOutcome) and isinstance(bg, FlowOutcome)
    assert tenant_a.wrong == 0 and tenant_b.wrong == 0
    assert not inc.failed and len(inc.flows) == 4
    assert not bg.failed and len(bg.flows) >= 20, [f.error for f in bg.failed]
    assert all(f.received_bytes == f.size_bytes for f in inc.flows + bg.flows)
    background_span = span_of_flows(bg)
    for name, (start, end) in (("tenant-a", span_of_allreduce(tenant_a)), ("tenant-b", span_of_allreduce(tenant_b)),
                               ("incast", span_of_flows(inc))):
        assert start < background_span[1] and background_span[0] < end, f"{name} did not overlap the background"
