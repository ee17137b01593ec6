"""The auto-tuner (TCCL's idea): measure (algorithm, chunk) candidates for a topology, host set and
message size in the testbed itself, keep the winner in a cache file, and use it for `--algo auto`.

A cache entry is keyed by a fingerprint of the topology (its YAML), the ranks in order and the
message size; a size not measured yet is tuned on first use. The sweep table (size × config) is
written to the job's directory as tuner-<size>.md and .json.
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


def tune(job: AllReduceJob, size_bytes: int, key: str, cache: TunerCache, out_dir: Path, iters: int = 2,
         algos: Sequence[str] | None = None, chunks: Sequence[int] = CANDIDATE_CHUNKS,
         progress: Callable[[str], None] | None = None) -> tuple[Pick, list[SizeResult]]:
    """Measure every candidate (algos: default, those worth trying on the job's servers), store and
    return the fastest (and the sweep)."""
    results = []
    todo = candidates(size_bytes, algos or algorithms_for(job.local or 1), chunks)
    for i, (algo, chunk) in enumerate(todo, 1):
        if progress:
            progress(f"tuner: {format_size(size_bytes)} candidate {i}/{len(todo)}: {algo} chunk {format_size(chunk)}")
        results.append(job.measure(size_bytes, algo=algo, chunk_bytes=chunk, iters=iters, warmup=1))
    wrong = [r for r in results if r.wrong]
    if wrong:
        raise RuntimeError(f"tuner: {wrong[0].algo} chunk {wrong[0].chunk_bytes} gave {wrong[0].wrong} wrong values")
    best = min(results, key=lambda r: r.time_s)
    cache.put(key, size_bytes, {"algo": best.algo, "chunk_bytes": best.chunk_bytes, "time_s": best.time_s,
                                "tuned": time.strftime("%Y-%m-%d %H:%M:%S")})
    write_sweep(out_dir, size_bytes, results, best)
    return Pick(best.algo, best.chunk_bytes, best.time_s, cached=False), results


def write_sweep(out_dir: Path, size_bytes: int, results: list[SizeResult], best: SizeResult) -> None:
    name = f"tuner-{format_size(size_bytes)}"
    table = format_table(sorted(results, key=lambda r: r.time_s))
    (out_dir / f"{name}.md").write_text(
        f"# Auto-tuner sweep: {format_size(size_bytes)} over {best.world} ranks\n\n"
        f"Pick: **{best.algo}, chunk {format_size(best.chunk_bytes)}** ({best.time_s * 1e3:.1f} ms)\n\n"
        f"```\n{table}\n```\n")
    (out_dir / f"{name}.json").write_text(json.dumps({
        "size_bytes": size_bytes, "pick": {"algo": best.algo, "chunk_bytes": best.chunk_bytes},
        "results": [r.to_dict() for r in results]}, indent=1))


def pick(job: AllReduceJob, size_bytes: int, key: str, cache: TunerCache, out_dir: Path,
         progress: Callable[[str], None] | None = None, **tune_kwargs: Any) -> Pick:
    """The cached pick for this size, tuning first if there is none."""
    entry = cache.get(key, size_bytes)
    if entry is not None:
        return Pick(entry["algo"], entry["chunk_bytes"], entry["time_s"], cached=True)
    found, _ = tune(job, size_bytes, key, cache, out_dir, progress=progress, **tune_kwargs)
    return found
