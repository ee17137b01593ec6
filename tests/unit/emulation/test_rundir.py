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


def test_a_testbed_whose_owner_died_is_cleaned_by_the_next_and_a_live_one_is_left(tmp_path: Path) -> None:
    from emulation.rundir import holder_of, new_run_dir, reap_orphans, record_interfaces, register
    from wire.runfiles import record_pid

    live = tmp_path / "live"
    orphan, mine = new_run_dir("orphan", tmp_path / "runs"), new_run_dir("mine", tmp_path / "runs")
    # The orphan's owner: a process that registers the run and dies (as a killed pytest would).
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from emulation.rundir import register;"
                    " register(Path(sys.argv[1]), Path(sys.argv[2]))", str(orphan), str(live)],
                   check=True, timeout=60, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    left, kept = (subprocess.Popen(["sleep", "60"]) for _ in range(2))
    try:
        record_pid(orphan, "switch-s1", left.pid)
        record_pid(mine, "switch-s1", kept.pid)
        record_interfaces(mine, ["s1-eth1"])
        register(mine, live)
        assert holder_of("s1-eth1", live) == mine.resolve() and holder_of("s1-eth2", live) is None
        done = reap_orphans(live)
        assert len(done) == 1 and str(orphan) in done[0] and f"pid {left.pid}" in done[0]
        assert left.wait(10) != 0 and kept.poll() is None
        assert sorted(p.name for p in live.iterdir()) == [mine.name]  # the orphan's entry is gone
        assert reap_orphans(live) == []
    finally:
        for proc in (left, kept):
            proc.kill()
            proc.wait()
