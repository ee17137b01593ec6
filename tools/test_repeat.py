"""Run a test tier N times and print, per test, how many of the N runs it passed.

    python tools/test_repeat.py N [pytest args...]     (default args: tests/integration tests/dataplane)

Each run writes JUnit XML to runs/test-repeat-<stamp>/run-<i>.xml; the table goes to stdout and
to table.txt beside them. Exit status 1 unless every test that ran passed in every run (skips are
listed as skips, never as passes)."""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARGS = ["tests/integration", "tests/dataplane"]


def outcomes(xml_path: Path) -> dict[str, str]:
    """test id -> passed | failed | error | skipped, from one JUnit XML file."""
    result = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        kinds = {child.tag for child in case}
        result[name] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                        else "skipped" if "skipped" in kinds else "passed")
    return result


def table(runs: list[dict[str, str]]) -> tuple[list[str], bool]:
    per_test: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        for name, outcome in run.items():
            per_test[name].append(outcome)
    n = len(runs)
    lines = [f"{'passed':>7}  test"]
    clean = True
    for name in sorted(per_test):
        got = per_test[name]
        if all(o == "skipped" for o in got):
            lines.append(f"{'skip':>7}  {name}")
            continue
        passed = got.count("passed")
        bad = [f"run {i + 1}: {o}" for i, o in enumerate(got) if o != "passed"]
        missing = n - len(got)
        clean &= passed == n
        note = f"   ({', '.join(bad)}{', ' if bad and missing else ''}{f'{missing} runs missing' if missing else ''})" \
            if passed != n else ""
        lines.append(f"{passed:>3}/{n:<3}  {name}{note}")
    return lines, clean


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    n, args = int(argv[0]), argv[1:] or DEFAULT_ARGS
    out_dir = ROOT / "runs" / f"test-repeat-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True)
    runs = []
    for i in range(1, n + 1):
        xml_path = out_dir / f"run-{i}.xml"
        started = time.monotonic()
        print(f"=== test-repeat: run {i} of {n} ({' '.join(args)})", flush=True)
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                f"--junitxml={xml_path}", *args], cwd=ROOT)
        if not xml_path.exists():
            print(f"=== run {i}: pytest exited {code} without a report", flush=True)
            runs.append({})
            continue
        runs.append(outcomes(xml_path))
        failed = [t for t, o in runs[-1].items() if o in ("failed", "error")]
        print(f"=== run {i}: exit {code}, {time.monotonic() - started:.0f} s, "
              f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}", flush=True)
    lines, clean = table(runs)
    text = "\n".join([f"test-repeat: {n} runs of {' '.join(args)}", *lines]) + "\n"
    (out_dir / "table.txt").write_text(text)
    print(text + f"(table and JUnit XML in {out_dir})")
    return 0 if clean and all(runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
