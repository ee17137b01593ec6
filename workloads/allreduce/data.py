"""The numbers a collective works on: float32 arrays derived from (seed, rank), and what each
rank must hold after it (`Workload`: all-reduce the sum; all-gather every rank's segment;
reduce-scatter its own segment of the sum; all-to-all, in its output, block i of rank i's input).

Every value is a multiple of 1/4 between -256 and 256, so any sum of up to 2^14 ranks is exact in
float32 whatever order an algorithm adds in: the result is compared bit for bit, and one wrong
element fails the run (the #wrong column of nccl-tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workloads.allreduce.schedule import alltoall_blocks, buffer_count, split

_MUL = np.uint32(0x9E3779B1)  # Knuth's multiplicative hash (odd, so i ↦ i·MUL mod 2^32 is a bijection)


def _key(seed: int, rank: int) -> np.uint32:
    return np.uint32((seed * 0x85EBCA6B + rank * 0xC2B2AE35 + 0x27D4EB2F) & 0xFFFFFFFF)


def _quarters(count: int, seed: int, rank: int) -> np.ndarray:
    """Integers in [-1024, 1024): the values × 4."""
    with np.errstate(over="ignore"):
        h = (np.arange(count, dtype=np.uint32) + _key(seed, rank)) * _MUL
        h ^= h >> np.uint32(15)
        h *= _MUL
    return (h >> np.uint32(21)).astype(np.int32) - 1024


def rank_data(count: int, seed: int, rank: int) -> np.ndarray:
    """The input buffer of `rank`: `count` float32 values."""
    return (_quarters(count, seed, rank) / 4).astype(np.float32)


def expected_sum(count: int, seed: int, world: int) -> np.ndarray:
    """The all-reduce (sum) of every rank's input, computed exactly."""
    total = np.zeros(count, dtype=np.int64)
    for rank in range(world):
        total += _quarters(count, seed, rank)
    return (total / 4).astype(np.float32)


def count_wrong(result: np.ndarray, expected: np.ndarray) -> int:
    """Elements whose bits differ (NaN-safe: compares the raw bytes)."""
    return int(np.count_nonzero(result.view(np.uint32) != expected.view(np.uint32)))


@dataclass
class Workload:
    """A rank's buffer before a collective, and what its checked part [lo, hi) must hold after."""

    initial: np.ndarray
    expected: np.ndarray
    lo: int
    hi: int

    def wrong(self, buf: np.ndarray) -> int:
        return count_wrong(buf[self.lo:self.hi], self.expected)


def workload(collective: str, count: int, seed: int, world: int, rank: int) -> Workload:
    """The buffer and the expected result of `rank` in `collective` of `count` elements (its segments
    and blocks as workloads.allreduce.schedule lays them out)."""
    mine = rank_data(count, seed, rank)
    if collective == "allreduce":
        return Workload(mine, expected_sum(count, seed, world), 0, count)
    segs = split(0, count, world)
    if collective == "allgather":
        expected = np.concatenate([rank_data(count, seed, r)[a:b] for r, (a, b) in enumerate(segs)])
        return Workload(mine, expected, 0, count)
    if collective == "reducescatter":
        a, b = segs[rank]
        return Workload(mine, expected_sum(count, seed, world)[a:b], a, b)
    if collective == "alltoall":
        buf = np.zeros(buffer_count(collective, count), dtype=np.float32)
        buf[:count] = mine
        buf[count:2 * count] = mine  # its own block, and a remainder no block covers, stay as they are
        expected = mine.copy()
        a, b = alltoall_blocks(world, count)[rank]
        for i, (lo, hi) in enumerate(alltoall_blocks(world, count)):
            expected[lo:hi] = rank_data(count, seed, i)[a:b]
        return Workload(buf, expected, count, 2 * count)
    raise ValueError(f"collective: unknown {collective!r}")
