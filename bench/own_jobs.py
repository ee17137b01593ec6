"""Your own jobs on the default fabric, against the goals of issue "Bring your own job", with verdicts.

    sudo .venv/bin/python bench/own_jobs.py [--sizes 1M,4M,16M] [--modes none,advice] [--runs 1] [--no-mpi]

Eight ranks (every host of the default leaf-spine, 20 Mbit/s links, soft data plane), one testbed,
the mode switched between runs:
1. PyTorch's Gloo all-reduce (examples/torch_collectives.py through the job launcher, undeclared)
   beside the testbed's own ring (workloads/allreduce, which declares its demands) at each size
   and mode: busbw, exact. Goals: Gloo within 15% of our ring in every mode; Gloo in mode advice
   >= mode none.
2. Open MPI's all-reduce (examples/mpi_allreduce.py through mpirun) at recursive doubling (3) and
   ring (4), 4 KiB-4 MiB, mode none: the measured crossover size, and the alpha-beta model's from
   alpha and beta fitted to the same times (recursive doubling log2(n)(a + m/b), ring 2(n-1)(a + m/(n b))).
Each figure is printed with the fidelity verdict of its run.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulation import budget  # noqa: E402
from emulation.net import Testbed  # noqa: E402
from topologies import leafspine  # noqa: E402
from workloads.allreduce.job import JobSpec, run_job  # noqa: E402
from workloads.command.job import CommandSpec, run_command  # noqa: E402
from workloads.fabric import FabricView  # noqa: E402
from workloads.hosts import format_size, parse_size  # noqa: E402

WITHIN = 0.15
MPI_SIZES = ("4K", "4M")
ROW = re.compile(r"^\s+all_reduce\s+(\d+)\s+\d+\s+float\s+sum\s+\S+\s+\S+\s+\S+\s+(\d+)\s+(\S+)$", re.M)
MPI_ROW = re.compile(r"^\s+(\d+)\s+\d+\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+\S+$", re.M)


def gloo(tb: Testbed, size: int, name: str) -> tuple[float, int]:
    """Gloo's busbw (Mbit/s) and wrong elements for one size."""
    program = ["{python}", str(ROOT / "examples/torch_collectives.py"), "-b", format_size(size), "--ops",
               "all_reduce", "-n", "2", "-w", "1"]
    outcome = run_command(CommandSpec(argv=program, hosts=[h.name for h in tb.topo.hosts], name=name,
                                      timeout_s=600), FabricView.of_testbed(tb), progress=None)
    log = (outcome.workdir / outcome.ranks[0].log).read_text(errors="replace")
    row = ROW.search(log)
    if not outcome.ok or row is None:
        raise SystemExit(f"{name}: {outcome.reason}\n{outcome.failure_tails()}")
    return float(row.group(3)), int(row.group(2))


def mpi(tb: Testbed, algorithm: str) -> dict[int, float]:
    """size (B) → Open MPI's all-reduce time (s) at one coll_tuned algorithm."""
    program = ["{python}", str(ROOT / "examples/mpi_allreduce.py"), "-b", MPI_SIZES[0], "-e", MPI_SIZES[1],
               "-f", "4", "-n", "2"]
    outcome = run_command(CommandSpec(argv=program, hosts=[h.name for h in tb.topo.hosts], name=f"mpi-{algorithm}",
                                      launcher="mpi", timeout_s=600,
                                      mpi_args=["--mca", "coll_tuned_use_dynamic_rules", "1",
                                                "--mca", "coll_tuned_allreduce_algorithm", algorithm]),
                          FabricView.of_testbed(tb), progress=None)
    log = (outcome.workdir / outcome.ranks[0].log).read_text(errors="replace")
    if not outcome.ok or "Out of bounds values : 0 OK" not in log:
        raise SystemExit(f"mpi {algorithm}: {outcome.reason}\n{outcome.failure_tails()}\n{log[-2000:]}")
    return {int(m.group(1)): int(m.group(2)) / 1e6 for m in MPI_ROW.finditer(log)}


def line_fit(times: dict[int, float]) -> tuple[float, float]:
    """t = a + b·m over the sizes (least squares): (a s, b s/B)."""
    sizes = sorted(times)
    b, a = np.polyfit(np.array(sizes, dtype=float), np.array([times[m] for m in sizes]), 1)
    return float(a), float(b)


def model_crossover(alpha_s: float, beta_bps: float, n: int) -> float:
    """Bytes where recursive doubling's log2(n)(a + m/b) meets the ring's 2(n-1)(a + m/(n b))."""
    steps_rd, steps_ring = math.log2(n), 2 * (n - 1)
    return (steps_ring - steps_rd) * alpha_s / ((steps_rd - steps_ring / n) * 8 / beta_bps)


def crossover(rd: dict[int, float], ring: dict[int, float]) -> str:
    """The measured crossover: between the largest size recursive doubling wins and the next."""
    sizes = sorted(set(rd) & set(ring))
    wins = [m for m in sizes if rd[m] < ring[m]]
    if not wins:
        return f"ring faster from {format_size(sizes[0])} on"
    last = max(wins)
    later = [m for m in sizes if m > last]
    return f"between {format_size(last)} and {format_size(later[0])}" if later else f"above {format_size(last)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,4M,16M")
    parser.add_argument("--modes", default="none,advice")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-mpi", action="store_true")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    modes = [m for m in args.modes.split(",") if m]  # --modes "": Open MPI's part only
    hosts = [f"h{i}" for i in range(1, 9)]
    print(budget.ring(leafspine(), hosts).line())
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with Testbed(leafspine(), dataplane="soft", name="bench-own-jobs", mode="none") as tb:
        link = FabricView.of_testbed(tb).link_mbps(hosts)
        print(f"8 ranks, links {link:g} Mbit/s; run directory {tb.run_dir}", flush=True)
        for mode in modes:
            tb.set_mode(mode)
            for run in range(1, args.runs + 1):
                for size in sizes:
                    t0 = tb.now()
                    gloo_mbps, wrong = gloo(tb, size, f"gloo-{mode}-{format_size(size)}-{run}")
                    v_gloo = tb.verdict(t0, tb.now())
                    t0 = tb.now()
                    ours = run_job(JobSpec(hosts=hosts, sizes=[size], algo="ring", iters=2, warmup=1,
                                           name=f"ring-{mode}-{format_size(size)}-{run}"),
                                   FabricView.of_testbed(tb), progress=None)
                    v_ours = tb.verdict(t0, tb.now())
                    ours_mbps = ours.results[0].busbw_gbs * 8e3
                    results.setdefault((mode, size), []).append((gloo_mbps, ours_mbps))
                    print(f"{mode:6} {format_size(size):>4} run {run}: Gloo {gloo_mbps:5.2f} Mbit/s "
                          f"({gloo_mbps / link:4.0%} of the link, {wrong} wrong; {v_gloo.line()})\n"
                          f"{'':6} {'':>4}        our ring {ours_mbps:5.2f} ({ours_mbps / link:4.0%}, "
                          f"{ours.wrong} wrong; {v_ours.line()}): Gloo/ours {gloo_mbps / ours_mbps:.2f}", flush=True)
        if not args.no_mpi:
            tb.set_mode("none")
            t0 = tb.now()
            rd, ring = mpi(tb, "3"), mpi(tb, "4")
            v_mpi = tb.verdict(t0, tb.now())
    if results:
        print("\n| size | mode | Gloo busbw (Mbit/s) | our ring | Gloo / ours |\n|---|---|---|---|---|")
        for (mode, size), values in results.items():
            g, o = min(v[0] for v in values), min(v[1] for v in values)
            print(f"| {format_size(size)} | {mode} | {g:.2f} | {o:.2f} | {g / o:.2f} |")
        within = all(abs(g / o - 1) <= WITHIN for values in results.values() for g, o in values)
        print(f"goal: Gloo within {WITHIN:.0%} of our ring in every mode and size -> {'MET' if within else 'NOT met'}")
    if "none" in modes and "advice" in modes:
        ratios = [min(v[0] for v in results[("advice", s)]) / max(v[0] for v in results[("none", s)]) for s in sizes]
        print(f"goal: Gloo in mode advice >= mode none -> advice/none "
              f"{', '.join(f'{format_size(s)} {r:.2f}' for s, r in zip(sizes, ratios, strict=True))}: "
              f"{'MET' if min(ratios) >= 1.0 else 'NOT met'}")
    if not args.no_mpi:
        (a_rd, b_rd), (a_ring, b_ring) = line_fit(rd), line_fit(ring)
        fitted = (a_ring - a_rd) / (b_rd - b_ring) if b_rd != b_ring else math.nan
        alpha = a_ring / 14  # the ring's intercept is 2(n-1) per-message latencies
        model = model_crossover(alpha, link * 1e6, 8)
        print(f"\nOpen MPI all-reduce, 8 ranks, mode none ({v_mpi.line()}):")
        print("| size | recursive doubling (ms) | ring (ms) |\n|---|---|---|")
        for m in sorted(rd):
            print(f"| {format_size(m)} | {rd[m] * 1e3:.1f} | {ring.get(m, math.nan) * 1e3:.1f} |")
        # the rate each algorithm's model term m/beta saw: log2(n)·m/beta and 2(n-1)/n·m/beta per byte
        print(f"fitted: recursive doubling {a_rd * 1e3:.1f} ms + m at {3 / b_rd * 8 / 1e6:.2f} Mbit/s per step, "
              f"ring {a_ring * 1e3:.1f} ms + m at {1.75 / b_ring * 8 / 1e6:.2f} Mbit/s (link {link:g})")
        print(f"crossover: measured {crossover(rd, ring)}; the two fitted lines cross at {fitted / 1024:.0f} KiB; "
              f"the alpha-beta model (alpha {alpha * 1e3:.2f} ms from the ring's intercept, beta the link's "
              f"{link:g} Mbit/s) at {model / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
