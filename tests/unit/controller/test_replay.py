"""A finished run played back (controller/replay.py): the state at a time is what the run's files
say it was then — ports from telemetry.csv, links from links.csv, suspects from suspects.csv, advice
from advice.csv — and the timeline has the faults injected and detected at their own times."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from controller.replay import Replay, RunNotReplayable
from testbed.__main__ import main as console
from topologies import leafspine
from topologies.addressing import AddressPlan
from wire import runfiles

T = 1_800_000_000.0


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    topo = leafspine()
    (tmp_path / runfiles.TOPOLOGY).write_text(topo.to_yaml())
    s3_to_s1 = topo.find_link("s3", "s1").port_of("s3")
    write_csv(tmp_path / runfiles.TELEMETRY, runfiles.TELEMETRY_FIELDS,
              [[T + 1.0, "s3", s3_to_s1, 4, 300, 18.0, 0.9], [T + 5.0, "s3", s3_to_s1, 0, 20, 2.0, 0.1]])
    write_csv(tmp_path / runfiles.LINKS, ["time", "link", "state", "detected_wall", "routes_written_ms",
                                          "route_updates", "advice_decided_ms"],
              [[T + 2.0, "s1-s3", "down", T + 2.0, 5, 12, ""], [T + 4.0, "s1-s3", "up", T + 4.0, 5, 12, ""]])
    with (tmp_path / runfiles.SUSPECTS).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(runfiles.SUSPECTS_FIELDS)
        writer.writerows(runfiles.suspects_rows(T + 2.5, [("link s1-s3", "down", 1.0, False, "carrier lost"),
                                                          ("switch s3", "slow-switch", 0.2, False, "hop latency")]))
        writer.writerows(runfiles.suspects_rows(T + 3.5, [("link s1-s3", "down", 1.0, True, "carrier lost")]))
        writer.writerows(runfiles.suspects_rows(T + 4.5, []))
    write_csv(tmp_path / runfiles.DIAGNOSIS, ["time", "target", "fault", "score", "evidence"],
              [[T + 3.5, "link s1-s3", "down", 1.0, "carrier lost"]])
    plan = AddressPlan(topo)
    h1, h5 = plan.hosts["h1"].ip, plan.hosts["h5"].ip
    write_csv(tmp_path / runfiles.ADVICE, ["time", "epoch", "src", "dst", "rate_bps", "reason"],
              [[T + 1.5, 1, h1, h5, 9_500_000, "change"], [T + 4.2, 2, h1, h5, 20_000_000, "clear"]])
    cut = {"kind": "link_down", "link": ["s3", "s1"]}
    fault = runfiles.FaultRecord(T + 1.9, T + 1.9, "link_down", "s3", "s1", cut, "link_down s3-s1")
    runfiles.append_fault(tmp_path, fault)
    return tmp_path


def test_the_state_at_a_time_is_what_the_runs_files_say(run_dir):
    replay = Replay(run_dir)
    assert (replay.t0, replay.t1) == (T + 1.0, T + 5.0)
    before = replay.state(T + 1.2)
    [(port, (queue, util, hop_s, capacity))] = before.ports.items()
    assert port[0] == "s3" and port[2] == "s1" and (queue, util, hop_s, capacity) == (4.0, 0.9, 300e-6, 20e6)
    assert before.seen[port] == T + 1.0 and set(before.links.values()) == {True} and before.suspects == []
    during = replay.state(T + 3.6)
    assert during.links[("s3", "s1")] is False
    assert during.advice == {("h1", "h5"): 9_500_000.0}
    assert [(s.target, s.fault, s.alert) for s in during.suspects] == [("link s1-s3", "down", True)]
    after = replay.state(T + 4.6)
    assert after.links[("s3", "s1")] is True and after.advice == {} and after.suspects == []
    assert after.ports[port][1] == 0.9  # the next report is at T + 5
    assert replay.state(T + 5.0).ports[port][1] == 0.1


def test_a_replays_timeline_has_each_event_at_its_own_time(run_dir):
    replay = Replay(run_dir, speed=1000.0)
    frames = replay.frames()
    replay.clock()  # starts it
    while replay.clock() < replay.t1:
        pass
    frame = frames.build(replay.state(replay.t1), replay.t1)
    assert frame["replay"]["run"] == run_dir.name and frame["replay"]["speed"] == 1000.0
    assert [(e["t"], e["kind"], e["text"]) for e in frame["events"]] == [
        (T + 1.9, "injected", "link_down s3-s1"), (T + 2.0, "detected", "link s3-s1 down (controller)"),
        (T + 3.5, "detected", "down at link s1-s3 (localiser)"),
        (T + 4.0, "detected", "link s3-s1 up again (controller)")]


def test_a_directory_that_is_not_a_run_is_refused_with_its_reason(tmp_path, capsys):
    with pytest.raises(RunNotReplayable, match="not a run directory"):
        Replay(tmp_path)
    assert console(["replay", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    (tmp_path / runfiles.TOPOLOGY).write_text(leafspine().to_yaml())
    with pytest.raises(RunNotReplayable, match="nothing|no telemetry"):
        Replay(tmp_path)
    with pytest.raises(RunNotReplayable, match="speed"):
        Replay(tmp_path, speed=0)

