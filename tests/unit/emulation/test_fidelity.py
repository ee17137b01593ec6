"""Fidelity records (wire/fidelity.py) and the verdict read from them (emulation/fidelity.py), on a driven clock."""

from __future__ import annotations

import pytest

from emulation.fidelity import FidelityIndex, drops_by_window, read_records, recent, verdict, window_span
from softswitch.egress import EgressQueue
from wire.fidelity import FidelityTail, FidelityWindows, create_file

T0 = 1_000_000.0  # wall-clock seconds, on a window boundary


@pytest.fixture()
def path(tmp_path):
    out = tmp_path / "fidelity.csv"
    create_file(out)
    return out


def test_windows_aggregate_samples_and_late_events_carry_their_span(path):
    fid = FidelityWindows(path, "s3", "switch", tolerance_ms=2.0)
    fid.tick(T0, 0)
    fid.events += 10
    fid.egress_late(0.0005, T0 + 0.01)
    fid.ingress_late(0.050, T0 + 0.08)  # a 50 ms stall seen at 80 ms
    fid.tick(T0 + 0.1, 3)
    fid.events += 5
    fid.tick(T0 + 0.25, 3)
    fid.close()
    first, second = read_records(path)
    assert (first.source, first.kind, first.events, first.late_events) == ("s3", "switch", 10, 1)
    assert first.max_late_ms == pytest.approx(50.0) and first.ingress_max_ms == pytest.approx(50.0)
    assert first.egress_max_ms == pytest.approx(0.5) and first.drops == 3
    assert first.late_from == pytest.approx(T0 + 0.03) and first.late_until == pytest.approx(T0 + 0.13)
    assert list(first.flagged()) == [first.window, first.window + 1]
    assert second.late_events == 0 and not second.flagged() and second.drops == 0


def test_samples_at_or_below_the_tolerance_are_not_late(path):
    fid = FidelityWindows(path, "s1", "switch", tolerance_ms=2.0)
    fid.tick(T0)
    fid.events += 1
    fid.late(0.002, T0 + 0.05)
    fid.close()
    (rec,) = read_records(path)
    assert rec.late_events == 0 and rec.max_late_ms == pytest.approx(2.0)


def test_bad_tolerance_is_refused(path):
    with pytest.raises(ValueError, match="tolerance"):
        FidelityWindows(path, "s1", "switch", tolerance_ms=0)


def test_verdict_names_the_worst_switch_and_counts_faithful_windows(path):
    s1, s3 = FidelityWindows(path, "s1", "switch"), FidelityWindows(path, "s3", "switch")
    ctl = FidelityWindows(path, "controller", "loop")
    for i in range(10):
        now = T0 + i * 0.1
        for fid in (s1, s3, ctl):
            fid.tick(now)
            fid.events += 1
        if i == 4:
            s3.late(0.041, now + 0.05)
        ctl.late(0.007 if i == 2 else 0.001, now + 0.01)
    for fid in (s1, s3, ctl):
        fid.close()
    records = read_records(path)
    result = verdict(records, T0, T0 + 1.0, run_start=T0 - 10)
    assert len(result.windows) == 10
    assert sorted(result.flagged) == [round(T0 / 0.1) + 4]
    assert result.fraction == pytest.approx(0.9)
    assert result.line() == ("timing held in 90.0% of 10 100 ms windows; worst 41.0 ms on s3 at t=10.4 s; "
                             "loop lag worst 7.0 ms (controller)")
    assert not result.is_faithful(T0 + 0.45) and result.is_faithful(T0 + 0.35)
    assert verdict(records, T0, T0 + 1.0, sources=["s1"]).fraction == 1.0  # s3 is not on this path
    assert recent(records, T0 + 1.0, 0.65)["s3"]["late_windows"] == 1
    assert recent(records, T0 + 1.0, 0.45)["s3"]["late_windows"] == 0
    # A BMv2 switch is timed from INT samples only: the verdict says so.
    bmv2 = verdict(records, T0, T0 + 1.0, sources=["s1", "s5"], sampled=["s5", "s6"])
    assert bmv2.line().endswith("; s5 (BMv2) timed from INT samples only (hop latency beyond the queue; "
                                "time in the kernel before BMv2 reads a frame unseen)")


def test_a_truncated_last_line_is_skipped(path):
    fid = FidelityWindows(path, "s1", "switch")
    fid.tick(T0, 0)
    fid.events += 1
    fid.tick(T0 + 0.1, 2)
    fid.close()
    with path.open("a") as f:
        f.write("1000000.2,s1,swi")
    assert [r.drops for r in read_records(path)] == [2]
    assert drops_by_window(read_records(path), "s1") == {round(T0 / 0.1): 2}


def test_egress_due_is_the_ideal_departure_of_a_backlogged_head():
    sent = []
    queue = EgressQueue(1, lambda f: sent.append(f) or len(f), 12.0, 64, 0.0)  # 1500 B per ms
    while queue.tokens >= 1500:
        queue.enqueue(b"x" * 1500, 0.0)
    queue.enqueue(b"x" * 1500, 0.0)
    assert queue.queue and queue.due == pytest.approx((1500 - queue.tokens) / 1.5e6)
    queue.enqueue(b"x" * 1500, 0.0)
    wait = queue.service(queue.due)
    assert queue.due == pytest.approx(queue.due) and wait == pytest.approx(0.001, rel=0.01)
    assert queue.service(1.0) is None and queue.due == 0.0


def test_the_index_gives_the_verdict_the_whole_file_gives_while_the_file_grows(path):
    """FidelityIndex (a testbed's verdicts) reads each line once, and a stall recorded long after it
    began still spoils the windows it reached back to, as the whole file says."""
    import random

    rng = random.Random(7)
    index = FidelityIndex(path)
    switches = [FidelityWindows(path, f"s{i}", "switch") for i in range(1, 4)]
    ctl = FidelityWindows(path, "controller", "loop")
    for i in range(300):
        now = T0 + i * 0.1
        for fid in (*switches, ctl):
            fid.tick(now)
            fid.events += 1
        if i == 200:  # a 3 s stall, seen 3 s after it began: windows 170..200
            switches[1].late(3.0, now + 0.05)
        elif rng.random() < 0.05:
            rng.choice(switches).late(rng.uniform(0.003, 0.3), now + 0.05)
        ctl.late(rng.uniform(0.0, 0.004), now + 0.01)
        if i % 70 == 0:  # read while the file grows (and a verdict asked on the way)
            index.records(*window_span(T0, now))
    for fid in (*switches, ctl):
        fid.close()
    with path.open("a") as f:
        f.write("1000029.9,s1,swi")  # a line still being written
    whole = read_records(path)
    for t0, t1 in ((T0, T0 + 30), (T0 + 17.5, T0 + 18.0), (T0 + 19.0, T0 + 21.0), (T0 + 5, T0 + 5.05)):
        expected = verdict(whole, t0, t1)
        got = verdict(index.records(*window_span(t0, t1)), t0, t1)
        assert (got.flagged, got.worst_ms, got.loop_worst) == (expected.flagged, expected.worst_ms,
                                                                expected.loop_worst)
    stall = verdict(index.records(*window_span(T0 + 17.5, T0 + 18.0)), T0 + 17.5, T0 + 18.0)
    assert stall.fraction == 0.0 and index.back >= 30
    assert len(index.records(*window_span(T0 + 5, T0 + 5.05))) < len(whole) / 4
    assert sorted(index.records(0, 2 ** 40), key=repr) == sorted(whole, key=repr)  # wider than the file


def test_lines_two_writers_cut_into_each_other_are_not_records(path):
    """On a run directory shared through FUSE, appends of two machines interleaved (O_APPEND is not
    atomic there): the pieces must not parse into records, above all not into one whose late span
    reaches 10^20 windows away, which held a verdict for minutes."""
    fid = FidelityWindows(path, "s1", "switch")
    fid.tick(T0, 0)
    fid.events += 1
    fid.late(0.004, T0 + 0.05)
    fid.tick(T0 + 0.1, 0)
    fid.close()
    with path.open("a") as f:
        f.write("1000000.2,h2,loop,91000000.2,h11,loop,9,1,2.941,1000000.225315,1000000.231197,0.000,0.000,\n"
                ",1,3.056,1000000.225448,1000000.231560,0.000,0.000,\n"
                "1000000.3,s1000000.3,controller,loop,4,4,24.764,1000000.389619,1000000.397151,0.000,0.000,\n"
                "4,switch,115,9,3.068,1000000.326981,1000000.393292,2.886,3.068,0\n"
                "100000031000000.4,s2,switch,1,1,3.0,1000000.40,1000000.41,3.0,0.0,0\n"
                "1000000.5,s2,switch,1,1,3.0,1000000.55,1000000.45,3.0,0.0,0\n"
                "1000000.6,s2,swatch,1,1,3.0,1000000.60,1000000.61,3.0,0.0,0\n")
    records = read_records(path)
    assert [(r.source, r.window) for r in records] == [("s1", round(T0 / 0.1))]
    index = FidelityIndex(path)
    assert index.records(*window_span(T0, T0 + 1)) == records
    assert verdict(records, T0, T0 + 1).fraction == pytest.approx(0.9)


def test_another_servers_file_is_read_beside_this_machines_even_when_it_appears_later(path):
    """Cluster mode: each server appends to fidelity-<server>.csv (runfiles.server_fidelity), never to
    the file this machine appends to; every reader takes both."""
    from wire.runfiles import server_fidelity

    here = FidelityWindows(path, "s1", "switch")
    here.tick(T0)
    here.events += 1
    here.tick(T0 + 0.1)
    index = FidelityIndex(path)
    tail = FidelityTail(path)
    assert [r.source for r in index.records(*window_span(T0, T0 + 1))] == ["s1"]
    assert server_fidelity("localhost") == path.name
    there = FidelityWindows(path.parent / server_fidelity("srv2"), "s7", "switch")
    there.tick(T0)
    there.events += 1
    there.late(0.01, T0 + 0.05)
    there.tick(T0 + 0.1)
    here.close()
    there.close()
    assert sorted(r.source for r in read_records(path)) == ["s1", "s7"]
    assert sorted(r.source for r in index.records(*window_span(T0, T0 + 1))) == ["s1", "s7"]
    assert {r.source for r in tail.poll()} == {"s1", "s7"}
    assert verdict(read_records(path), T0, T0 + 1).worst_source == "s7"
