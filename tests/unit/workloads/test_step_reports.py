"""Ranks report their step timings to the controller (ReportSteps) piece by piece as they complete:
real rank processes over loopback against the controller's API served in this process."""

from __future__ import annotations

import asyncio
import statistics
import threading

from controller.advice import AdviceLoop
from controller.service import start_server
from controller.telemetry import Collector
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire import advice_pb2 as pb
from wire import faultsfile
from workloads.allreduce.launcher import AllReduceJob
from workloads.hosts import LocalSpawner, local_endpoints


class Recorder:
    """The controller's report_steps, keeping what the ranks sent."""

    def __init__(self) -> None:
        self.reports: list[pb.StepReport] = []

    def report_steps(self, report: pb.StepReport) -> int:
        copy = pb.StepReport()
        copy.CopyFrom(report)
        self.reports.append(copy)
        return 1


def test_every_piece_is_reported_with_its_own_work_and_a_slow_rank_shows(tmp_path):
    topo = leafspine()
    plan = AddressPlan(topo)
    recorder = Recorder()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def serve():
        collector = Collector({plan.switches[s.name].device_id: s.name for s in topo.switches})
        server, _ = await start_server(tmp_path, collector, AdviceLoop(topo, plan, collector, tmp_path, "none"),
                                       recorder)
        return server

    server = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    try:
        faultsfile.write(tmp_path / "local2.faults.json", {"compute_delay_ms": 50})
        address = (tmp_path / "controller.addr").read_text().strip()
        with AllReduceJob(local_endpoints(3), LocalSpawner(), tmp_path / "job", name="rep", controller=address,
                          declare=False, faults_file=lambda host: tmp_path / f"{host}.faults.json") as job:
            result = job.measure(4 * 30_000, chunk_bytes=4 * 10_000, iters=2, warmup=0)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert result.wrong == 0
    pieces = {}  # (rank, iteration) → received pieces' own work
    for report in recorder.reports:
        assert (report.job, report.world, report.host) == ("rep", 3, "127.0.0.1")
        pieces.setdefault((report.rank, report.iteration), []).extend(s.compute_s for s in report.steps if not s.send)
    # 3 ranks, a ring of 2 x 2 steps, each step of 10,000 elements one piece: 4 received pieces per iteration
    assert sorted(pieces) == [(r, i) for r in range(3) for i in (1, 2)]
    assert all(len(work) == 4 for work in pieces.values())
    assert all(w >= 0.05 for i in (1, 2) for w in pieces[(2, i)])
    assert statistics.median(w for r in (0, 1) for i in (1, 2) for w in pieces[(r, i)]) < 0.025
