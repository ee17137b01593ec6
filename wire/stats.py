"""Summary statistics every layer reports the same way: one percentile, Jain's fairness index."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th (0..100) percentile by nearest rank: the smallest value with at least q% of the values
    at or below it, always one of the values (with few samples p99 is the largest); NaN for none."""
    data = list(values)
    return float(np.percentile(data, q, method="inverted_cdf")) if data else math.nan


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0
