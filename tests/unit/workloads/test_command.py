"""Your own program, one rank per host (workloads/command), here with ranks on loopback: the variables
each rank gets, the job's end when one fails or the timeout passes (nothing left running), the
figures from the ranks' metrics lines, bad specs named; and the PyTorch examples, exact over Gloo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from workloads.command.__main__ import main
from workloads.command.job import CommandSpec, hosts_cidr, run_command, summarise_metrics
from workloads.command.mpiagent import main as mpiagent
from workloads.hosts import JobError

ROOT = Path(__file__).resolve().parents[3]
SHOW_ENV = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', "
            "'MASTER_ADDR', 'MASTER_PORT', 'GLOO_SOCKET_IFNAME', 'OMP_NUM_THREADS', 'STARNET_HOST', 'EXTRA')})); "
            "open(os.environ['STARNET_METRICS'], 'a').write(json.dumps({'step': 0, 'step_s': 0.1 * (1 + int("
            "os.environ['RANK']))}) + '\\n')")


def _alive(marker: str) -> list[str]:
    """PIDs whose command line holds `marker` (the test's own sleeps)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "cmdline").read_bytes():
                    found.append(proc.name)
            except OSError:
                pass
    return found


def test_every_rank_gets_torchruns_variables_and_its_metrics_become_figures(tmp_path):
    spec = CommandSpec(argv=["{python}", "-c", SHOW_ENV], local=3, name="env", master_port=29611,
                       env={"EXTRA": "x"})
    outcome = run_command(spec, progress=None, workdir=tmp_path / "env")
    assert outcome.ok, outcome.table
    seen = [json.loads((tmp_path / "env" / r.log).read_text().splitlines()[0]) for r in outcome.ranks]
    assert [s["RANK"] for s in seen] == ["0", "1", "2"]
    assert {(s["WORLD_SIZE"], s["LOCAL_RANK"], s["MASTER_ADDR"], s["MASTER_PORT"], s["GLOO_SOCKET_IFNAME"],
             s["OMP_NUM_THREADS"], s["EXTRA"]) for s in seen} == {("3", "0", "127.0.0.1", "29611", "lo", "1", "x")}
    assert [s["STARNET_HOST"] for s in seen] == ["local0", "local1", "local2"]
    assert outcome.metrics == {"step_s_p50": pytest.approx(0.2), "step_s_p99": pytest.approx(0.3), "step_s_n": 3}
    assert "# step_s: p50 0.2, p99 0.3 over 3 values" in outcome.table
    saved = json.loads((tmp_path / "env" / "results.json").read_text())
    assert saved["status"] == "ok" and [r["exit_code"] for r in saved["ranks"]] == [0, 0, 0]


def test_a_failing_rank_ends_the_others_and_their_children(tmp_path):
    marker = "287.5"
    script = f"sleep {marker} & if [ $RANK = 1 ]; then echo about to fail; exit 3; fi; sleep {marker}"
    outcome = run_command(CommandSpec(argv=["sh", "-c", script], local=3, name="fail", grace_s=2), progress=None,
                          workdir=tmp_path / "fail")
    assert outcome.status == "failed" and outcome.reason.startswith("rank 1 (local1) exited 3")
    assert [r.status for r in outcome.ranks] == ["ended", "failed", "ended"]
    assert outcome.ranks[1].exit_code == 3 and outcome.ranks[0].exit_code == -15
    assert "about to fail" in outcome.failure_tails()
    assert outcome.elapsed_s < 10
    assert _alive(marker) == []


def test_a_hung_job_is_ended_by_its_timeout(tmp_path):
    marker = "288.5"
    outcome = run_command(CommandSpec(argv=["sleep", marker], local=2, name="hung", timeout_s=1, grace_s=1),
                          progress=None, workdir=tmp_path / "hung")
    assert outcome.status == "timeout" and "after the timeout of 1 s" in outcome.reason
    assert [r.status for r in outcome.ranks] == ["timeout", "timeout"]
    assert _alive(marker) == []


def test_metrics_lines_that_are_not_json_objects_are_skipped(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"step": 1, "t": 2.0, "ok": true, "name": "x"}\nnot json\n[1, 2]\n{"t": 4')
    (tmp_path / "b.jsonl").write_text('{"t": 1.0}\n{"t": NaN}\n')
    assert summarise_metrics([tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "none.jsonl"]) == {
        "t_p50": 1.0, "t_p99": 2.0, "t_n": 2}


@pytest.mark.parametrize(("spec", "message"), [
    (CommandSpec(argv=[], local=2), "give the program to run"),
    (CommandSpec(argv=["true"]), "give at least one host"),
    (CommandSpec(argv=["true"], local=2, hosts=["h1"]), "give one of them"),
    (CommandSpec(argv=["true"], local=2, timeout_s=0), "timeout_s must be > 0"),
    (CommandSpec(argv=["true"], local=2, master_port=80), "master_port: must be in 1024..65535"),
    (CommandSpec(argv=["true"], local=2, env={"A=B": "1"}), "env: 'A=B' is not a variable name"),
])
def test_bad_specs_are_named(spec, message):
    with pytest.raises(JobError, match=message):
        spec.check()


def test_the_command_line_says_what_is_wrong_and_exits_2(capsys):
    assert main(["--local", "2", "--env", "NOVALUE", "--", "true"]) == 2
    assert "--env: 'NOVALUE' is not NAME=VALUE" in capsys.readouterr().err
    assert main(["--local", "2"]) == 2
    assert "give the program to run" in capsys.readouterr().err


def test_the_pytorch_examples_run_exactly_over_gloo(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is the optional extra `make deps` installs ('.[torch]')")
    collectives = run_command(CommandSpec(argv=["{python}", str(ROOT / "examples/torch_collectives.py"), "-b", "64K",
                                                "-n", "1", "-w", "0"], local=2, name="coll", master_port=29612,
                                          timeout_s=120), progress=None, workdir=tmp_path / "coll")
    log = (tmp_path / "coll" / collectives.ranks[0].log).read_text()
    assert collectives.ok, collectives.table + collectives.failure_tails()
    assert "# Out of bounds values : 0 OK" in log
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert f"{op}_64K_busbw_mbps_p50" in collectives.metrics
    ddp = run_command(CommandSpec(argv=[sys.executable, str(ROOT / "examples/ddp_train.py"), "--steps", "6",
                                        "--hidden", "32"], local=2, name="ddp", master_port=29613, timeout_s=120),
                      progress=None, workdir=tmp_path / "ddp")
    assert ddp.ok, ddp.table + ddp.failure_tails()
    assert ddp.metrics["step_s_n"] == 12 and all("(fell)" in r.tail[-1] for r in ddp.ranks)


def test_open_mpi_runs_the_mpi4py_example_through_mpirun_exactly(tmp_path):
    pytest.importorskip("mpi4py", reason="Debian's python3-mpi4py, which `make deps` installs and links into the venv")
    program = ["{python}", str(ROOT / "examples/mpi_allreduce.py"), "-b", "4K", "-e", "16K", "-n", "1"]
    outcome = run_command(CommandSpec(argv=program, local=2, name="mpi", launcher="mpi", timeout_s=60,
                                      mpi_args=["--mca", "coll_tuned_use_dynamic_rules", "1",
                                                "--mca", "coll_tuned_allreduce_algorithm", "4"]),
                          progress=None, workdir=tmp_path / "mpi")
    log = (tmp_path / "mpi" / outcome.ranks[0].log).read_text(errors="replace")
    assert outcome.ok, outcome.table + outcome.failure_tails()
    assert "2 ranks, Open MPI" in log and "algorithm 4" in log and "# Out of bounds values : 0 OK" in log
    assert set(outcome.metrics) >= {"allreduce_4K_time_s_p50", "allreduce_16K_time_s_p50"}


def test_mpi_options_the_cidr_and_the_agents_errors(tmp_path, capsys):
    assert hosts_cidr(["10.0.3.1", "10.0.3.4", "10.0.4.2"]) == "10.0.0.0/21"
    assert hosts_cidr(["10.0.3.1"]) == "10.0.3.1/32"
    with pytest.raises(JobError, match="mpi_args: only with launcher mpi"):
        CommandSpec(argv=["true"], local=2, mpi_args=["-x", "A"]).check()
    (tmp_path / "hosts.json").write_text('{"10.0.3.2": {"name": "h2", "pid": 1}}')
    assert mpiagent([str(tmp_path / "hosts.json"), "10.0.9.9", "orted"]) == 2
    assert "no host '10.0.9.9'" in capsys.readouterr().err
