"""lab/ledger.py: a bench's cells kept per version of the code they measured."""

from __future__ import annotations

import subprocess

from lab.ledger import ROOT, TESTBED_CODE, Ledger


def test_cells_add_up_in_the_ledger_of_the_code_as_it_is(tmp_path):
    ledger = Ledger.for_code("bench-x", ("lab/ledger.py",), runs=tmp_path)
    commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", "lab/ledger.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.strip()
    assert ledger.path.parent == tmp_path / "bench-x"
    assert ledger.path.name == f"{commit}{'' if ledger.clean else '-dirty'}.jsonl"
    assert Ledger.for_code("bench-x", TESTBED_CODE, tag="short0.3", runs=tmp_path).path.stem.endswith("-short0.3")
    assert ledger.rows() == []
    ledger.add({"seed": 1, "share": 0.9})
    ledger.add({"seed": 2, "share": 0.8})
    with ledger.path.open("a") as f:
        f.write('{"seed": 3, "sha')  # a bench killed mid-line
    rows = ledger.rows()
    assert [(r["seed"], r["share"]) for r in rows] == [(1, 0.9), (2, 0.8)]
    assert all(len(r["at"]) == len("2026-12-07 23:40") for r in rows)
