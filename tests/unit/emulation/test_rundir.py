"""Run directories go anywhere: runs/ in the source tree by default, or under STARNET_RUNS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from emulation.rundir import PROJECT_ROOT

SHOW = "from emulation.rundir import RUNS, new_run_dir; print(RUNS); print(new_run_dir('probe'))"


def where(env: dict[str, str]) -> list[Path]:
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return [Path(line) for line in out.split()]


def test_a_run_directory_goes_where_starnet_runs_says(tmp_path: Path) -> None:
    runs, run_dir = where({**os.environ, "STARNET_RUNS": str(tmp_path / "elsewhere")})
    assert runs == tmp_path / "elsewhere"
    assert run_dir.parent == runs and run_dir.name.endswith("-probe")
    assert (run_dir / "pids").is_dir() and (run_dir / "switches").is_dir()


def test_by_default_run_directories_are_under_the_source_tree() -> None:
    env = {k: v for k, v in os.environ.items() if k != "STARNET_RUNS"}
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    runs = subprocess.run([sys.executable, "-c", "from emulation.rundir import RUNS; print(RUNS)"], env=env,
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert Path(runs) == PROJECT_ROOT / "runs"
