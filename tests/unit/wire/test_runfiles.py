"""Reading a run's CSV files while their writers append to them."""

from pathlib import Path

from wire import runfiles


def test_read_rows_keeps_whole_rows_only(tmp_path: Path) -> None:
    path = tmp_path / runfiles.LINKS
    assert runfiles.read_rows(path) == []  # not written yet
    path.write_text("time,link,state\n1.0,s1-s2,down\n2.0,s1-")  # the last line half written
    assert runfiles.read_rows(path) == [{"time": "1.0", "link": "s1-s2", "state": "down"}]
    with path.open("a") as f:
        f.write("s2,up\n3.0,s2-s3\n")  # a row short of a field
    assert [r["time"] for r in runfiles.read_rows(path)] == ["1.0", "2.0"]


def test_read_rows_of_a_half_written_header_is_empty(tmp_path: Path) -> None:
    path = tmp_path / runfiles.LINKS
    path.write_text("time,li")
    assert runfiles.read_rows(path) == []


def test_read_rows_keeps_empty_fields(tmp_path: Path) -> None:
    path = tmp_path / "telemetry.csv"
    path.write_text("time,utilisation\n1.0,\n")
    assert runfiles.read_rows(path) == [{"time": "1.0", "utilisation": ""}]
