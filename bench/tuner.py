"""The auto-tuner against an exhaustive sweep, over the grid of issue "Multi-GPU servers".

    sudo .venv/bin/python bench/tuner.py [--servers 2] [--gpus 4] [--ratios 2,4,8] [--sizes 4M,16M]
        [--collectives allreduce,allgather,alltoall] [--link-mbps 10] [--iters 1] [--warmup 1]

Per cell (server count, NVLink ratio, size, collective) on railopt (soft data plane, mode none):
the whole grid of (algorithm, chunk, NVLink+NET split) measured once (tuner.tune(exhaustive=True)),
then the tuner's search replayed on those measurements (tuner.search), so both are judged on the
same numbers. Goals (TCCL's Auto-Tune, AutoCCL's search): the search's pick within 5% of the grid's
best in >= 90% of cells, with <= 20% of the grid's trials; at r = 2 the all-reduce pick is not
hier (NVLink is the bottleneck there). Every cell prints its fidelity verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emulation.net import Testbed  # noqa: E402
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
    args = parser.parse_args()
    cells = []
    for servers in (int(n) for n in args.servers.split(",")):
        for ratio in (float(r) for r in args.ratios.split(",")):
            topo = railopt(servers, args.gpus, 2, ratio).scaled(args.link_mbps)
            with Testbed(topo, dataplane="soft", name=f"bench-tuner-{servers}x{args.gpus}-r{ratio:g}") as tb:
                view = FabricView.of_testbed(tb)
                hosts = [h.name for h in tb.topo.hosts]
                print(f"\n{topo.name}: {servers} servers x {args.gpus} GPUs, NICs {args.link_mbps:g} Mbit/s, NVLink "
                      f"{ratio:g}x; run directory {tb.run_dir}", flush=True)
                workdir = view.job_dir("tuner")
                job = AllReduceJob(view.endpoints(hosts, "topology"), view.spawner(workdir.name), workdir, name="tuner",
                                   controller=view.controller_address())
                with job:
                    for size in (parse_size(s) for s in args.sizes.split(",")):
                        for collective in args.collectives.split(","):
                            t0 = tb.now()
                            _, sweep = tune(job, size, f"{collective}-{size}", TunerCache(workdir / "cache.json"),
                                            workdir, iters=args.iters, collective=collective, exhaustive=True,
                                            warmup=args.warmup, progress=lambda line: print(f"    {line}", flush=True))
                            verdict = tb.verdict(t0, tb.now())
                            times = {Config(r.algo, r.chunk_bytes, r.split): r.time_s for r in sweep}
                            pick, asked = replay(size, algorithms_for(job.local or 1, collective), times)
                            best = min(times, key=times.__getitem__)
                            cell = {"servers": servers, "ratio": ratio, "size": size, "collective": collective,
                                    "pick": pick, "best": best, "off": times[pick] / times[best] - 1,
                                    "trials": asked, "grid": len(times), "faithful": verdict.fraction}
                            cells.append(cell)
                            print(f"  {format_size(size):>4} {collective:13} grid {len(times):3} configs, best "
                                  f"{best.algo} {format_size(best.chunk_bytes)} split {best.split:.0%}; search "
                                  f"{asked} trials -> {pick.algo} {format_size(pick.chunk_bytes)} split "
                                  f"{pick.split:.0%}, {cell['off']:+.1%}; {verdict.line()}", flush=True)
    close = sum(c["off"] <= WITHIN for c in cells)
    share = max(c["trials"] / c["grid"] for c in cells)
    print("\ngoals:")
    print(f"  pick within {WITHIN:.0%} of the grid's best in {close}/{len(cells)} cells (goal >= {IN_CELLS:.0%}) "
          f"{'MET' if close >= IN_CELLS * len(cells) else 'NOT met'}")
    print(f"  trials: at most {share:.0%} of the grid (goal <= {TRIALS:.0%}) {'MET' if share <= TRIALS else 'NOT met'}")
    at_two = [c for c in cells if c["ratio"] == 2 and c["collective"] == "allreduce"]
    if at_two:
        hier = sum(c["pick"].algo == "hier" for c in at_two)
        print(f"  all-reduce at r = 2 picks hier in {hier}/{len(at_two)} cells (goal 0) "
              f"{'MET' if not hier else 'NOT met'}")
    print(f"  faithful windows: {min(c['faithful'] for c in cells):.0%}-{max(c['faithful'] for c in cells):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
