"""All-reduce jobs on the default testbed (8 hosts, 20 Mbit/s links, soft data plane): every algorithm
gives the exact sum over all hosts, the ring keeps the links busy, and the auto-tuner picks what it
measured fastest and keeps it in its cache. Busbw is printed with the fidelity verdict of its run.
"""

from __future__ import annotations

import json

import pytest

from emulation.fidelity import Verdict
from emulation.net import Testbed
from lab.incast import measure_faithfully
from topologies import leafspine
from workloads.allreduce.job import JobOutcome, JobSpec, run_job
from workloads.fabric import FabricView

pytestmark = [pytest.mark.mininet, pytest.mark.root]
LINK_MBPS = 20.0
# The goal (the ring over all hosts, >= 8 MB, at busbw >= 85% of the link) is a figure, and
# figures live in bench/allreduce_busbw.py with their fidelity verdict (advice mode: 90-91% here).
# The test holds a floor that a broken pipeline (serialised steps, a stalled rank, drops) falls
# under and a loaded run does not, in both modes, and prints busbw beside the goal.
RING_GOAL = 0.85
# 0.30: on 2026-12-06 the advised ring ran at 36-40% of the link here with this code and with the code
# CI had passed at 45% (the soft switches saturating both cores, the ranks starved; none: 58-80%).
# A serialised ring runs at about 1/8 of the link and stays under it.
RING_FLOOR = 0.30
ALL = [f"h{i}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(), dataplane="soft", name="test-allreduce", mode="none") as tb:
        yield tb


def busbw_mbps(outcome: JobOutcome) -> float:
    (result,) = outcome.results
    return result.busbw_gbs * 8e3


def test_every_algorithm_over_all_hosts_is_exact_and_the_ring_keeps_the_links_busy(fabric):
    view = FabricView.of_testbed(fabric)
    lines = []
    for algo in ("ring", "tree", "hd"):
        t0 = fabric.now()
        outcome = run_job(JobSpec(hosts=ALL, sizes=[8 << 20], algo=algo, iters=2 if algo == "ring" else 1,
                                  warmup=1 if algo == "ring" else 0, name=algo), view, progress=None)
        verdict = fabric.verdict(t0, fabric.now())
        print("\n" + outcome.table)
        lines.append(f"  {algo:4}: busbw {busbw_mbps(outcome):5.2f} Mbit/s = {busbw_mbps(outcome) / LINK_MBPS:4.0%} "
                     f"of the link; {verdict.line()}")
        assert outcome.wrong == 0, outcome.table
        assert outcome.hosts == ALL  # topology order: h1-h4 under s3, h5-h8 under s4
        assert {s[0] for s in outcome.results[0].steps} == set(range(8))  # every rank's step timings
        if algo == "ring":
            ring = outcome
    # The same ring with the advice loop on: each rank declares its transfer, and only flows that
    # carry data are demands (the ACK direction used to halve every NIC: 45% of the link).
    fabric.set_mode("advice")
    tries = iter(("ring-advice", "ring-advice-again"))

    def measured() -> tuple[JobOutcome, Verdict]:
        t0 = fabric.now()
        outcome = run_job(JobSpec(hosts=ALL, sizes=[8 << 20], algo="ring", iters=2, name=next(tries)), view,
                          progress=None)
        return outcome, fabric.verdict(t0, fabric.now())
    try:
        # a run the machine stalled under (CI, 2026-12-06: nothing ran for seconds at a time, 36% of
        # the link, every pair advised its line rate) is measured again, as the incast test does
        advised, verdict = measure_faithfully(measured, lambda r: r[1], who_else=fabric.who_took_the_machine)
    finally:
        fabric.set_mode("none")
    lines.append(f"  ring, mode advice: busbw {busbw_mbps(advised):5.2f} Mbit/s = "
                 f"{busbw_mbps(advised) / LINK_MBPS:4.0%} of the link (goal {RING_GOAL:.0%}: the bench's figure); "
                 f"{verdict.line()}")
    print("\n" + advised.table)
    print("\n".join(lines))
    assert advised.wrong == 0
    assert busbw_mbps(ring) >= RING_FLOOR * LINK_MBPS, ring.table
    assert busbw_mbps(advised) >= RING_FLOOR * LINK_MBPS, advised.table


def test_auto_picks_the_fastest_candidate_it_measured_and_caches_it(fabric, tmp_path):
    view = FabricView.of_testbed(fabric)
    hosts = ["h1", "h2", "h5", "h6"]
    spec = JobSpec(hosts=hosts, sizes=[2 << 20], algo="auto", iters=2, name="auto", tuner_cache=tmp_path / "c.json",
                   tuner_iters=1)
    outcome = run_job(spec, view, progress=None)
    print("\n" + (outcome.workdir / "tuner-2M.md").read_text() + outcome.table)
    assert outcome.wrong == 0
    measured = json.loads((outcome.workdir / "tuner-2M.json").read_text())["results"]
    assert len(measured) >= 9 and all(r["wrong"] == 0 for r in measured)  # 3 algorithms × their chunks
    fastest = min(measured, key=lambda r: r["time_us"])
    (auto,) = outcome.results
    assert (auto.algo, auto.chunk_bytes) == (fastest["algo"], fastest["chunk_bytes"])
    print(f"  auto ({auto.algo}, chunk {auto.chunk_bytes} B) re-measured {auto.time_s * 1e6 / fastest['time_us']:.3f}"
          f" x its tuning measurement (goal <= 1.05: bench figure, single measurements vary here)")
    again = run_job(JobSpec(hosts=hosts, sizes=[2 << 20], algo="auto", iters=1, warmup=0, name="auto2",
                            tuner_cache=tmp_path / "c.json"), view, progress=None)
    assert again.picks[2 << 20]["cached"] and again.results[0].algo == auto.algo and again.wrong == 0
