"""The numbers an all-reduce works on: float32 arrays derived from (seed, rank), and their sum.

Every value is a multiple of 1/4 between -256 and 256, so any sum of up to 2^14 ranks is exact in
float32 whatever order an algorithm adds in: the result is compared bit for bit, and one wrong
element fails the run (the #wrong column of nccl-tests).
"""

from __future__ import annotations

import numpy as np

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
