"""A scenario report's end-of-run lines (lab/report.py): the links down and the localiser's last
ranking as the run's files have them, and whether the live page's replay of the run shows the same
at its end."""

from __future__ import annotations

import csv
from pathlib import Path

from lab.report import end_of_run, end_of_run_lines
from topologies import leafspine
from wire import runfiles

T = 1_800_000_000.0
LINKS_HEADER = ["time", "link", "state", "detected_wall", "routes_written_ms", "route_updates", "advice_decided_ms"]


def write_run(run_dir: Path, links: list[list], rankings: list[tuple[float, list]]) -> None:
    (run_dir / runfiles.TOPOLOGY).write_text(leafspine().to_yaml())
    with (run_dir / runfiles.LINKS).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(LINKS_HEADER)
        writer.writerows(links)
    with (run_dir / runfiles.SUSPECTS).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(runfiles.SUSPECTS_FIELDS)
        for t, ranking in rankings:
            writer.writerows(runfiles.suspects_rows(t, ranking))


def test_a_link_still_down_and_the_last_ranking_are_reported_and_the_replay_agrees(tmp_path):
    write_run(tmp_path,
              [[T + 1, "s1-s3", "down", T + 1, 5, 12, ""], [T + 2, "s2-s4", "down", T + 2, 5, 12, ""],
               [T + 3, "s1-s3", "up", T + 3, 5, 12, ""]],
              [(T + 1.5, [("link s1-s3", "down", 1.0, True, "carrier lost")]),
               (T + 2.5, [("link s4-s2", "down", 1.0, True, "carrier lost"),
                          ("switch s4", "slow-switch", 0.25, False, "hop latency")])])
    ranking, down = end_of_run(tmp_path)
    assert ranking == [("link s4-s2", "down", 1.0, True), ("switch s4", "slow-switch", 0.25, False)]
    assert down == [frozenset(("s2", "s4"))]
    lines = end_of_run_lines(tmp_path, len(leafspine().links))
    assert lines == ["links at the end: 1 down (s2-s4)",
                     "the localiser's suspects at the end: 1. link s4-s2: down 1.00 (alert); "
                     "2. switch s4: slow-switch 0.25",
                     "replay: its last frame shows the same suspects and link states"]


def test_a_quiet_run_ends_with_every_link_up_and_no_suspect(tmp_path):
    write_run(tmp_path, [[T + 1, "s1-s3", "down", T + 1, 5, 12, ""], [T + 3, "s1-s3", "up", T + 3, 5, 12, ""]],
              [(T + 1.5, [("link s1-s3", "down", 1.0, True, "carrier lost")]), (T + 4, [])])
    lines = end_of_run_lines(tmp_path, 12)
    assert lines[:2] == ["links at the end: all 12 up", "the localiser's suspects at the end: none"]
    assert lines[2] == "replay: its last frame shows the same suspects and link states"


def test_a_directory_that_is_no_run_says_the_replay_cannot_play_it(tmp_path):
    lines = end_of_run_lines(tmp_path, 12)
    assert lines[0] == "links at the end: all 12 up"
    assert lines[2].startswith("replay: cannot play this run back (") and runfiles.TOPOLOGY in lines[2]
