"""tools/test_repeat.py: JUnit outcomes per test and the pass-count table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("test_repeat", Path(__file__).parents[3] / "tools" / "test_repeat.py")
test_repeat = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(test_repeat)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_a" name="test_ok" time="1"/>
<testcase classname="tests.integration.test_a" name="test_flaky" time="1">{flaky}</testcase>
<testcase classname="tests.dataplane.test_b" name="test_x[bmv2]" time="0"><skipped message="no bmv2"/></testcase>
</testsuite></testsuites>"""


def write(tmp_path: Path, i: int, flaky: str) -> Path:
    path = tmp_path / f"run-{i}.xml"
    path.write_text(JUNIT.format(flaky=flaky))
    return path


def test_outcomes_read_pass_fail_skip(tmp_path):
    got = test_repeat.outcomes(write(tmp_path, 1, '<failure message="boom"/>'))
    assert got == {"tests/integration/test_a.py::test_ok": "passed",
                   "tests/integration/test_a.py::test_flaky": "failed",
                   "tests/dataplane/test_b.py::test_x[bmv2]": "skipped"}


def test_table_counts_passes_and_names_the_failing_runs(tmp_path):
    runs = [test_repeat.outcomes(write(tmp_path, 1, "")), test_repeat.outcomes(write(tmp_path, 2, "<error/>")),
            test_repeat.outcomes(write(tmp_path, 3, ""))]
    lines, clean = test_repeat.table(runs)
    assert not clean
    assert any("2/3" in line and "test_flaky" in line and "run 2: error" in line for line in lines), lines
    assert any("3/3" in line and "test_ok" in line for line in lines), lines
    assert any(line.strip().startswith("skip") and "test_x[bmv2]" in line for line in lines), lines
    assert test_repeat.table(runs[:1])[1]
