"""The failover measure's gap in a flow's acknowledgements, and the sampler's silence beside it."""

from __future__ import annotations

import csv
from pathlib import Path

from lab.failover import longest_gap

FIELDS = ["time", "sport", "dst", "dport", "bytes_acked"]


def write(path: Path, rows: list[tuple[float, str, int]]) -> Path:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(FIELDS)
        for t, dport, acked in rows:
            out.writerow([t, "5000", "10.0.3.1", dport, acked])
    return path


def test_the_gap_is_the_busiest_connections_and_a_silent_sampler_is_told_apart(tmp_path: Path) -> None:
    busy = [(0.00, "1", 0), (0.01, "1", 100), (0.02, "1", 100), (0.03, "1", 100), (0.04, "1", 300),
            (0.16, "1", 400), (0.17, "1", 500)]  # 40 ms without progress sampled; 120 ms without a sample
    idle = [(t, "2", 0) for t in (0.0, 0.5)]  # never acknowledges more: not the one measured
    path = write(tmp_path / "tcp.csv", busy + idle)
    gap, blind = longest_gap(path, 0.0, 1.0)
    assert round(gap, 3) == 0.12 and round(blind, 3) == 0.12  # a gap no longer than the silence: unresolved
    gap, blind = longest_gap(path, 0.0, 0.1)  # only what the window holds
    assert round(gap, 3) == 0.12 and round(blind, 3) == 0.12
    gap, blind = longest_gap(write(tmp_path / "t2.csv", busy[:5]), 0.0, 1.0)
    assert round(gap, 3) == 0.03 and round(blind, 3) == 0.01
