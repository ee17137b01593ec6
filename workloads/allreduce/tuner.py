"""The auto-tuner (TCCL's Auto-Tune, searched as AutoCCL does): measure (algorithm, chunk, NVLink+NET
split) configurations of a collective for a topology, host set and message size in the testbed
itself, keep the winner in a cache file, and use it for `--algo auto`.

It does not measure the whole grid: every algorithm at the default chunk, every chunk for the two
fastest, then the split of the best raised while it helps (`tune(exhaustive=True)` measures all,
the yardstick). A cache entry is keyed by a fingerprint of the topology (its YAML), the ranks in
order, the collective (other than all-reduce) and the message size; a size not measured yet is
tuned on first use. The sweep table is written to the job's directory as tuner-[collective-]<size>.md
and .json, with how many of the grid's configurations were tried.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulation.rundir import RUNS
from workloads.allreduce.executor import DEFAULT_CHUNK_BYTES
from workloads.allreduce.launcher import AllReduceJob, SizeResult, format_table
from workloads.allreduce.schedule import FLAT, algorithms_for
from workloads.hosts import format_size

DEFAULT_CACHE = RUNS / "tuner-cache.json"
CANDIDATE_CHUNKS = (64 << 10, 256 << 10, 1 << 20, 4 << 20)


@dataclass(frozen=True)
class Pick:
    algo: str
    chunk_bytes: int
    time_s: float  # as measured while tuning
    cached: bool
    split: float = 0.0


def fingerprint(topology_yaml: str, hosts: list[str]) -> str:
    digest = hashlib.sha256(topology_yaml.encode()).hexdigest()[:16]
    return f"{digest}:{','.join(hosts)}"


class TunerCache:
    def __init__(self, path: Path = DEFAULT_CACHE) -> None:
        self.path = path

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"tuner cache {self.path}: unreadable ({exc}); delete it to tune again") from exc

    def get(self, key: str, size_bytes: int) -> dict | None:
        return self._load().get(key, {}).get(str(size_bytes))

    def put(self, key: str, size_bytes: int, entry: dict) -> None:
        data = self._load()
        data.setdefault(key, {})[str(size_bytes)] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(self.path)


def candidates(size_bytes: int, algos: Sequence[str] = FLAT,
               chunks: Sequence[int] = CANDIDATE_CHUNKS) -> list[tuple[str, int]]:
    """Every (algorithm, chunk) pair; chunks larger than the message collapse into one (the message)."""
    out: list[tuple[str, int]] = []
    for algo in algos:
        seen = set()
        for chunk in chunks:
            effective = min(chunk, size_bytes)
            if effective not in seen:
                seen.add(effective)
                out.append((algo, effective))
    return out


CANDIDATE_SPLITS = (0.125, 0.25, 0.5)  # NVLink+NET: the share of a server's internal traffic through its NICs


@dataclass(frozen=True)
class Config:
    algo: str
    chunk_bytes: int
    split: float = 0.0


def grid(size_bytes: int, algos: Sequence[str], chunks: Sequence[int], splits: Sequence[float]) -> list[Config]:
    """Every configuration an exhaustive sweep would measure (splits: besides 0, where servers hold
    several ranks)."""
    return [Config(algo, chunk, split) for algo, chunk in candidates(size_bytes, algos, chunks)
            for split in (0.0, *splits)]


def search(size_bytes: int, algos: Sequence[str], chunks: Sequence[int], splits: Sequence[float],
           time_of: Callable[[Config], float]) -> Config:
    """The coordinate descent over the grid, on any measurement (`time_of`: a live trial, or a
    recorded sweep, to judge the search against the exhaustive best): every algorithm at the default
    chunk; every chunk for the two fastest; the split of the best raised while it helps."""
    seen: dict[Config, float] = {}

    def timed(config: Config) -> float:
        if config not in seen:
            seen[config] = time_of(config)
        return seen[config]

    default = min(DEFAULT_CHUNK_BYTES, size_bytes)
    for algo in sorted(algos, key=lambda a: timed(Config(a, default)))[:2]:
        for _, chunk in candidates(size_bytes, (algo,), chunks):
            timed(Config(algo, chunk))
    best = min(seen, key=seen.__getitem__)
    for split in splits:  # hill-climb the split from 0 while it helps
        if timed(Config(best.algo, best.chunk_bytes, split)) >= seen[best]:
            break
        best = Config(best.algo, best.chunk_bytes, split)
    return best


def tune(job: AllReduceJob, size_bytes: int, key: str, cache: TunerCache, out_dir: Path, iters: int = 2,
         algos: Sequence[str] | None = None, chunks: Sequence[int] = CANDIDATE_CHUNKS,
         splits: Sequence[float] | None = None, collective: str = "allreduce", exhaustive: bool = False,
         progress: Callable[[str], None] | None = None, warmup: int = 1) -> tuple[Pick, list[SizeResult]]:
    """Find the fastest configuration without measuring the whole grid (AutoCCL's coordinate
    descent): every algorithm at the default chunk; every chunk for the two fastest algorithms;
    then, where servers hold several ranks, the NVLink+NET split of the best, raised while it helps.
    With `exhaustive`, the whole grid (the yardstick). Each trial: `warmup` untimed iterations, then
    `iters` timed. Stores and returns the fastest, and the sweep."""
    local = job.local or 1
    algos = algos or algorithms_for(local, collective)
    splits = (CANDIDATE_SPLITS if local > 1 else ()) if splits is None else splits
    measured: dict[Config, SizeResult] = {}

    def trial(config: Config) -> SizeResult:
        if config not in measured:
            if progress:
                progress(f"tuner: {format_size(size_bytes)} {collective} trial {len(measured) + 1}: {config.algo} "
                         f"chunk {format_size(config.chunk_bytes)}"
                         + (f" split {config.split:.0%}" if config.split else ""))
            measured[config] = job.measure(size_bytes, algo=config.algo, chunk_bytes=config.chunk_bytes, iters=iters,
                                           warmup=warmup, collective=collective, split=config.split)
        return measured[config]

    if exhaustive:
        for config in grid(size_bytes, algos, chunks, splits):
            trial(config)
    else:
        search(size_bytes, algos, chunks, splits, lambda c: trial(c).time_s)
    results = list(measured.values())
    wrong = [r for r in results if r.wrong]
    if wrong:
        raise RuntimeError(f"tuner: {wrong[0].label} chunk {wrong[0].chunk_bytes} gave {wrong[0].wrong} wrong values")
    best_result = min(results, key=lambda r: r.time_s)
    grid_size = len(grid(size_bytes, algos, chunks, splits))
    cache.put(key, size_bytes, {"algo": best_result.algo, "chunk_bytes": best_result.chunk_bytes,
                                "split": best_result.split, "time_s": best_result.time_s,
                                "trials": len(results), "grid": grid_size,
                                "tuned": time.strftime("%Y-%m-%d %H:%M:%S")})
    write_sweep(out_dir, size_bytes, results, best_result, grid_size)
    return Pick(best_result.algo, best_result.chunk_bytes, best_result.time_s, cached=False,
                split=best_result.split), results


def write_sweep(out_dir: Path, size_bytes: int, results: list[SizeResult], best: SizeResult, grid_size: int) -> None:
    name = f"tuner-{best.collective}-{format_size(size_bytes)}" if best.collective != "allreduce" \
        else f"tuner-{format_size(size_bytes)}"
    table = format_table(sorted(results, key=lambda r: r.time_s))
    (out_dir / f"{name}.md").write_text(
        f"# Auto-tuner sweep: {best.collective} of {format_size(size_bytes)} over {best.world} ranks\n\n"
        f"Pick: **{best.label}, chunk {format_size(best.chunk_bytes)}** ({best.time_s * 1e3:.1f} ms); "
        f"{len(results)} trials of the {grid_size} in the grid\n\n"
        f"```\n{table}\n```\n")
    (out_dir / f"{name}.json").write_text(json.dumps({
        "size_bytes": size_bytes, "collective": best.collective,
        "pick": {"algo": best.algo, "chunk_bytes": best.chunk_bytes, "split": best.split},
        "trials": len(results), "grid": grid_size, "results": [r.to_dict() for r in results]}, indent=1))


def pick(job: AllReduceJob, size_bytes: int, key: str, cache: TunerCache, out_dir: Path,
         progress: Callable[[str], None] | None = None, **tune_kwargs: Any) -> Pick:
    """The cached pick for this size, tuning first if there is none."""
    entry = cache.get(key, size_bytes)
    if entry is not None:
        return Pick(entry["algo"], entry["chunk_bytes"], entry["time_s"], cached=True, split=entry.get("split", 0.0))
    found, _ = tune(job, size_bytes, key, cache, out_dir, progress=progress, **tune_kwargs)
    return found
