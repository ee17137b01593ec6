"""The failover measure's gap in a flow's acknowledgements, and the sampler's silence beside it."""

from __future__ import annotations

import csv
from pathlib import Path

from lab.failover import AckedTo, longest_gap

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


def test_acked_to_follows_the_growing_file_and_counts_only_its_destination(tmp_path: Path) -> None:
    path = tmp_path / "tcp.csv"
    acked = AckedTo(path, "10.0.3.1")
    assert acked() == 0  # no file yet
    write(path, [(0.0, "1", 100), (0.01, "1", 5000)])
    assert acked() == 5000
    with path.open("a") as f:
        f.write("0.02,5000,10.0.9.9,1,999999\n")  # another destination
        f.write("0.03,5000,10.0.3.1,1,70")  # still being written: waits for its end of line
    assert acked() == 5000
    with path.open("a") as f:
        f.write("00\n")
    assert acked() == 7000
