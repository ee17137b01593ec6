"""Each fuzz target runs under libFuzzer (atheris) for FUZZ_SECONDS (default 60) from the committed
seed corpus: any crash fails the test, and its input is kept in runs/fuzz-*/ for a regression test.
Long runs: `make fuzz SECONDS=600`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TARGETS = {"pipeline": HERE / "fuzz_pipeline.py", "topology": HERE / "fuzz_topology.py"}
SECONDS = int(os.environ.get("FUZZ_SECONDS", "60"))


@pytest.mark.timeout(SECONDS + 180)
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_target_runs_without_a_crash(name):
    work = ROOT / "runs" / f"fuzz-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    corpus = work / "corpus"
    shutil.copytree(HERE / "corpus" / name, corpus)
    dictionary = HERE / f"{name}.dict"
    options = [f"-dict={dictionary}"] if dictionary.exists() else []
    result = subprocess.run(
        [sys.executable, str(TARGETS[name]), f"-max_total_time={SECONDS}", "-print_final_stats=1",
         f"-artifact_prefix={work}/", *options, str(corpus)],
        cwd=ROOT, capture_output=True, text=True, timeout=SECONDS + 120)
    log = "\n".join(line for line in (result.stdout + result.stderr).splitlines()
                    if not line.startswith("INFO: Instrumenting"))
    (work / "fuzz.log").write_text(log)
    crashes = sorted(p.name for p in work.glob("crash-*"))
    stats = [line for line in log.splitlines() if line.startswith(("stat::number_of_executed_units", "#"))][-1:]
    print(f"{name}: {SECONDS} s, {stats}, corpus {len(list(corpus.iterdir()))} inputs")
    assert result.returncode == 0 and not crashes, (
        f"{name}: exit {result.returncode}, {crashes} in {work}\n{log[-3000:]}")
