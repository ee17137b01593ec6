"""The one percentile (nearest rank) every report uses."""

from __future__ import annotations

import math

from wire.stats import percentile


def test_nearest_rank_is_a_value_of_the_list() -> None:
    values = list(range(1, 11))  # 1..10
    assert percentile(values, 99) == 10  # with few samples, p99 is the largest
    assert percentile(values, 50) == 5
    assert percentile(values, 90) == 9
    assert percentile(values, 0) == 1
    assert percentile(reversed(values), 50) == 5


def test_no_values_no_percentile() -> None:
    assert math.isnan(percentile([], 99))
