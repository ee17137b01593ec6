"""The auto-tuner against an exhaustive sweep, over the grid of issue "Multi-GPU servers".

    sudo .venv/bin/python bench/tuner.py [--servers 2] [--gpus 4] [--ratios 2,4,8] [--sizes 4M,16M]
        [--collectives allreduce,allgather,alltoall] [--link-mbps 10] [--iters 1] [--warmup 1]

Per cell (server count, NVLink ratio, size, collective) on railopt (soft data plane, mode none):
the whole grid of (algorithm, chunk, NVLink+NET split) measured once (tuner.tune(exhaustive=True)),
then the tuner's search replayed on those measurements (tuner.search), so both are judged on the
same numbers. Goals (TCCL's Auto-Tune, AutoCCL's search): the search's pick within 5% of the grid's
best in >= 90% of cells, with <= 20% of the grid's trials; at r = 2 the all-reduce pick is not
hier (NVLink is the bottleneck there). Every cell prints its fidelity verdict.

An exhaustive sweep is 80 trials, minutes to an hour a cell on a 2-core machine, so each cell's
sweep goes to a ledger as it ends (lab/ledger.py: runs/bench-tuner/<commit>.jsonl, per version of
the code measured); a run measures only the cells of its grid the ledger lacks, and the goals are
judged over every cell of the grid it holds. `--table` judges without measuring.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emulation.net import Testbed  # noqa: E402
from lab.ledger import TESTBED_CODE, Ledger  # noqa: E402
from topologies import railopt  # noqa: E402
from workloads.allreduce.launcher import AllReduceJob  # noqa: E402
from workloads.allreduce.schedule import algorithms_for  # noqa: E402
from workloads.allreduce.tuner import (  # noqa: E402
    CANDIDATE_CHUNKS,
    CANDIDATE_SPLITS,
    Config,
    TunerCache,
    search,
    tune,
)
from workloads.fabric import FabricView  # noqa: E402
from workloads.hosts import format_size, parse_size  # noqa: E402

WITHIN = 0.05  # the pick's time at most 5% above the grid's best
IN_CELLS = 0.90
TRIALS = 0.20


def replay(size: int, algos: tuple[str, ...], times: dict[Config, float]) -> tuple[Config, int]:
    """The search's pick on a recorded sweep, and how many configurations it asked for."""
    asked: list[Config] = []

    def recorded(config: Config) -> float:
        asked.append(config)
        return times[config]

    return search(size, algos, CANDIDATE_CHUNKS, CANDIDATE_SPLITS, recorded), len(asked)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="2")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--ratios", default="2,4,8")
    parser.add_argument("--sizes", default="4M,16M")
    parser.add_argument("--collectives", default="allreduce,allgather,alltoall")
    parser.add_argument("--link-mbps", type=float, default=10.0)
    parser.add_argument("--iters", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations per trial (0 halves a sweep's time)")
    parser.add_argument("--table", action="store_true", help="run nothing: the goals over this code's ledger")
    args = parser.parse_args()
    ledger = Ledger.for_code("bench-tuner", CODE)
    print(f"ledger: {ledger.path}{'' if ledger.clean else ' (code differs from its commit: kept apart)'}", flush=True)
    wanted = [Cell(servers, args.gpus, ratio, size, collective, args.link_mbps, args.iters, args.warmup)
              for servers in (int(n) for n in args.servers.split(","))
              for ratio in (float(r) for r in args.ratios.split(","))
              for size in (parse_size(s) for s in args.sizes.split(","))
              for collective in args.collectives.split(",")]
    done = {Cell(**row["cell"]) for row in ledger.rows()}
    todo = [c for c in wanted if c not in done]
    print(f"{len(wanted)} cells asked, {len(wanted) - len(todo)} in the ledger already, {len(todo)} to measure",
          flush=True)
    if not args.table:
        for (servers, ratio), cells in itertools.groupby(todo, key=lambda c: (c.servers, c.ratio)):
            measure(servers, args.gpus, ratio, args.link_mbps, list(cells), ledger)
    return judge(wanted, ledger)


CODE = (*TESTBED_CODE, "bench/tuner.py")


@dataclass(frozen=True)
class Cell:
    """One cell of the grid, and the way it was measured."""

    servers: int
    gpus: int
    ratio: float
    size: int
    collective: str
    link_mbps: float
    iters: int
    warmup: int


def measure(servers: int, gpus: int, ratio: float, link_mbps: float, cells: list[Cell], ledger: Ledger) -> None:
    """The exhaustive sweep of each cell on one testbed of `servers` x `gpus` at NVLink `ratio`, each
    into the ledger as it ends (the whole grid's times and the run's fidelity)."""
    topo = railopt(servers, gpus, 2, ratio).scaled(link_mbps)
    with Testbed(topo, dataplane="soft", name=f"bench-tuner-{servers}x{gpus}-r{ratio:g}") as tb:
        view = FabricView.of_testbed(tb)
        hosts = [h.name for h in tb.topo.hosts]
        print(f"\n{topo.name}: {servers} servers x {gpus} GPUs, NICs {link_mbps:g} Mbit/s, NVLink {ratio:g}x; "
              f"run directory {tb.run_dir}", flush=True)
        workdir = view.job_dir("tuner")
        job = AllReduceJob(view.endpoints(hosts, "topology"), view.spawner(workdir.name), workdir, name="tuner",
                           controller=view.controller_address())
        with job:
            for cell in cells:
                t0 = tb.now()
                _, sweep = tune(job, cell.size, f"{cell.collective}-{cell.size}", TunerCache(workdir / "cache.json"),
                                workdir, iters=cell.iters, collective=cell.collective, exhaustive=True,
                                warmup=cell.warmup, progress=lambda line: print(f"    {line}", flush=True))
                verdict = tb.verdict(t0, tb.now())
                ledger.add({"cell": dataclasses.asdict(cell), "local": job.local or 1,
                            "times": [[r.algo, r.chunk_bytes, r.split, r.time_s] for r in sweep],
                            "faithful": verdict.fraction, "verdict": verdict.line()})
                print(f"  {format_size(cell.size):>4} {cell.collective}: {len(sweep)} configurations measured; "
                      f"{verdict.line()}", flush=True)


def judge(wanted: list[Cell], ledger: Ledger) -> int:
    """Each cell of `wanted` the ledger holds (the latest measurement of it): the search replayed on
    its sweep against its best, then the goals over them."""
    latest = {Cell(**row["cell"]): row for row in ledger.rows()}
    cells = []
    for cell in (c for c in wanted if c in latest):
        row = latest[cell]
        times = {Config(algo, chunk, split): t for algo, chunk, split, t in row["times"]}
        pick, asked = replay(cell.size, algorithms_for(row["local"], cell.collective), times)
        best = min(times, key=times.__getitem__)
        off = times[pick] / times[best] - 1
        cells.append({"cell": cell, "pick": pick, "best": best, "off": off, "trials": asked, "grid": len(times),
                      "faithful": row["faithful"]})
        print(f"  {cell.servers}x{cell.gpus} r{cell.ratio:g} {format_size(cell.size):>4} {cell.collective:13} grid "
              f"{len(times):3} configs, best {best.algo} {format_size(best.chunk_bytes)} split {best.split:.0%}; "
              f"search {asked} trials -> {pick.algo} {format_size(pick.chunk_bytes)} split {pick.split:.0%}, "
              f"{off:+.1%}; {row['faithful']:.0%} of windows faithful ({row['at']})")
    if not cells:
        print(f"no cell of this grid in {ledger.path} yet")
        return 1
    close = sum(c["off"] <= WITHIN for c in cells)
    share = max(c["trials"] / c["grid"] for c in cells)
    print(f"\ngoals ({len(cells)} of the {len(wanted)} cells asked measured):")
    print(f"  pick within {WITHIN:.0%} of the grid's best in {close}/{len(cells)} cells (goal >= {IN_CELLS:.0%}) "
          f"{'MET' if close >= IN_CELLS * len(cells) else 'NOT met'}")
    print(f"  trials: at most {share:.0%} of the grid (goal <= {TRIALS:.0%}) {'MET' if share <= TRIALS else 'NOT met'}")
    at_two = [c for c in cells if c["cell"].ratio == 2 and c["cell"].collective == "allreduce"]
    if at_two:
        hier = sum(c["pick"].algo == "hier" for c in at_two)
        print(f"  all-reduce at r = 2 picks hier in {hier}/{len(at_two)} cells (goal 0) "
              f"{'MET' if not hier else 'NOT met'}")
    print(f"  faithful windows: {min(c['faithful'] for c in cells):.0%}-{max(c['faithful'] for c in cells):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
