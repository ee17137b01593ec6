"""Scenario files: experiments/*.yaml parse, and bad files are refused before anything starts, with
the field named; the report's first table is computed from the runs it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.report import first_table
from lab.results import JobRecord, ModeRun, PortFigures, ScenarioResult
from lab.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[3]
GOOD = """
name: t
modes: [none, advice]
duration_s: 30
topology: {name: leafspine, args: {spines: 2, leaves: 2, hosts_per_leaf: 2}, spine_capacity_mbps: 10}
jobs:
  - {name: ar, kind: allreduce, hosts: [h1, h3], size: 64K, iters: 2}
  - {name: inc, kind: incast, receiver: h3, senders: [h1, h2], size: 128K, start_s: 1}
  - {name: bg, kind: background, hosts: all, load: 0.1, seconds: 5}
  - {name: pat, kind: pattern, pattern: staggered, p_edge: 0.4, p_pod: 0.2, size: 2M}
  - {name: fixed, kind: allreduce, hosts: [h2, h4], size: 64K, ports: fixed}
  - {name: train, kind: command, hosts: [h1, h3], command: "{python} ddp.py --name 'a b'", timeout_s: 20,
     env: {GLOO_ALGO: ring, N: 2}}
faults:
  - {at_s: 2, kind: link_down, link: [s3, s1]}
  - {at_s: 4, kind: loss, link: [s1, s4], percent: 2.5}
  - {at_s: 6, kind: flap, link: [s4, s2], count: 10, period_s: 0.5}
  - {at_s: 12, kind: rate, link: [s3, s1], mbps: 10}
  - {at_s: 14, kind: delay, switch: s2, delay_ms: 5}
  - {at_s: 16, kind: delay, host: h3, delay_ms: 20}
"""


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_experiment_file_parses(path):
    scenario = load_scenario(path)
    assert scenario.jobs and scenario.modes


def test_a_good_file_reads_as_written():
    s = parse_scenario(GOOD)
    assert [j.name for j in s.jobs] == ["ar", "inc", "bg", "pat", "fixed", "train"]
    train = s.jobs[5]
    assert (train.command, train.hosts, train.timeout_s, train.env, train.master_port) == (
        ["{python}", "ddp.py", "--name", "a b"], ["h1", "h3"], 20, {"GLOO_ALGO": "ring", "N": "2"}, 29500)
    assert (s.jobs[0].ports, s.jobs[4].ports) == ("ephemeral", "fixed")  # ephemeral unless asked
    assert (s.jobs[3].pattern, s.jobs[3].p_edge, s.jobs[3].p_pod, s.jobs[3].size_bytes) == ("staggered", 0.4, 0.2,
                                                                                           2 << 20)
    assert s.jobs[3].hosts == ["h1", "h2", "h3", "h4"]
    assert s.jobs[0].size_bytes == 64 << 10 and s.jobs[2].hosts == ["h1", "h2", "h3", "h4"]
    assert {link.capacity_mbps for link in s.topology.links if s.topology.is_switch(link.a)
            and s.topology.is_switch(link.b)} == {10.0}
    assert s.faults[0].fault.link == ("s3", "s1")
    assert (s.faults[1].fault.kind, s.faults[1].fault.link, s.faults[1].fault.percent) == ("loss", ("s1", "s4"), 2.5)
    assert (s.faults[2].fault.count, s.faults[2].fault.period_s) == (10, 0.5)
    assert (s.faults[3].fault.link, s.faults[3].fault.mbps, s.faults[4].fault.link, s.faults[4].fault.delay_ms) == (
        ("s3", "s1"), 10, ("s2", "s2"), 5)
    assert (s.faults[5].fault.kind, s.faults[5].fault.link, s.faults[5].fault.delay_ms) == ("delay", ("h3", "h3"), 20)
    short = s.shortened(0.5)
    assert short.faults[2].fault.period_s == 0.25
    assert short.jobs[0].size_bytes == 32 << 10 and short.jobs[1].start_s == 0.5 and short.duration_s == 15


@pytest.mark.parametrize(("old", "new", "field"), [
    ("hosts: [h1, h3]", "hosts: [h1, h99]", r"jobs\[0\]\.hosts\[1\]: no host 'h99'"),
    ("size: 64K, iters", "size: -4, iters", r"jobs\[0\]\.size: must be at least 4 bytes"),
    ("link: [s3, s1]", "link: [s1, s2]", r"faults\[0\]\.link: no link between s1 and s2"),
    ("receiver: h3", "receiver: h9", r"jobs\[1\]\.receiver: no host 'h9'"),
    ("modes: [none, advice]", "modes: [none, fast]", r"modes\[1\]: 'fast' is not one of"),
    ("load: 0.1", "load: 2", r"jobs\[2\]\.load: must be in"),
    ("kind: incast", "kind: broadcast", r"jobs\[1\]\.kind: 'broadcast' is not one of"),
    ("iters: 2}", "iters: 2, colour: red}", r"jobs\[0\]\.colour: unknown field"),
    ("name: inc", "name: ar", r"jobs\[1\]\.name: 'ar' is used by jobs\[0\] too"),
    ("at_s: 2", "at_s: 99", r"faults\[0\]\.at_s: must be in \[0, 30\]"),
    ("percent: 2.5", "percent: 101", r"faults\[1\]\.percent: must be in \[0, 100\]"),
    ("link: [s1, s4], percent", "link: [s3, h1], percent", r"faults\[1\]\.link: .*h1 is not one"),
    ("count: 10, period_s: 0.5", "count: 10, period_s: 5", r"faults\[2\]: 10 flaps of 5 s from 6 s end after"),
    ("count: 10,", "count: 2.5,", r"faults\[2\]\.count: must be a whole number"),
    ("kind: link_down, link: [s3, s1]", "kind: link_down, link: [s3, s1], percent: 5",
     r"faults\[0\]\.percent: unknown field"),
    ("switch: s2, delay_ms", "switch: h1, delay_ms", r"faults\[4\]\.switch: no switch 'h1'"),
    ("delay_ms: 5}", "delay_ms: -1}", r"faults\[4\]\.delay_ms: must be in \[0, 1000\]"),
    ("host: h3, delay_ms", "host: s3, delay_ms", r"faults\[5\]\.host: no host 's3'"),
    ("host: h3, delay_ms", "host: h3, switch: s1, delay_ms", r"faults\[5\]: a delay names one switch"),
    ("link: [s3, s1], mbps", "link: [h1, s3], mbps", r"faults\[3\]\.link: a rate is a switch port's"),
    ("name: leafspine", "name: torus", r"topology\.name: 'torus' is not one of"),
    ("size: 64K, iters", "size: 66, iters", r"jobs\[0\]\.size: must be a multiple of 4"),
    ("pattern: staggered", "pattern: shuffle", r"jobs\[3\]\.pattern: 'shuffle' is not one of stride, staggered"),
    ("p_pod: 0.2", "p_pod: 0.7", r"jobs\[3\]\.p_pod: must be in \[0, 0\.6\]"),
    ("ports: fixed", "ports: random", r"jobs\[4\]\.ports: 'random' is not one of ephemeral, fixed"),
    ("ports: fixed", "ports: ephemeral, port_base: 30000", r"jobs\[4\]\.ports: port_base gives fixed ports"),
    ("command: \"{python} ddp.py --name 'a b'\"", 'command: " "', r"jobs\[5\]\.command: is empty"),
    ("command: \"{python} ddp.py --name 'a b'\"", "command: [python, {x: 1}]",
     r"jobs\[5\]\.command: must be a string or a list of strings"),
    ("command: \"{python} ddp.py --name 'a b'\"", "command: \"python 'unclosed\"", r"jobs\[5\]\.command: cannot split"),
    ("timeout_s: 20", "timeout_s: 99", r"jobs\[5\]\.timeout_s: must be in \[0\.1, 30\]"),
    ("env: {GLOO_ALGO: ring, N: 2}", "env: [GLOO_ALGO]", r"jobs\[5\]\.env: must be a mapping"),
    ("env: {GLOO_ALGO: ring, N: 2}", "env: {GLOO_ALGO: [a]}", r"jobs\[5\]\.env\.GLOO_ALGO: must be NAME: value"),
    ("timeout_s: 20,", "timeout_s: 20, master_port: 80,", r"jobs\[5\]\.master_port: must be in \[1024, 65535\]"),
    ("timeout_s: 20,", "timeout_s: 20, launcher: slurm,", r"jobs\[5\]\.launcher: 'slurm' is not one of direct, mpi"),
    ("timeout_s: 20,", "timeout_s: 20, mpi_args: '--mca x 1',", r"jobs\[5\]\.mpi_args: only with launcher: mpi"),
])
def test_bad_files_name_the_field(old, new, field):
    assert old in GOOD
    with pytest.raises(ScenarioError, match=field):
        parse_scenario(GOOD.replace(old, new), "bad.yaml")


def test_not_yaml_and_not_a_file_are_errors_naming_the_source(tmp_path):
    with pytest.raises(ScenarioError, match=r"bad\.yaml: not valid YAML"):
        parse_scenario("jobs: [", "bad.yaml")
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def _run(mode: str, busbw: float, p99: float, drops: int, elapsed: float) -> ModeRun:
    job = JobRecord("ar", "allreduce", 0.0, started=100.0, ended=100.0 + elapsed, ok=True,
                    figures={"busbw_mbps": busbw})
    ports = [PortFigures("s3", 3, "s1", 50, p99, p99, drops, 0.8), PortFigures("s3", 1, "h1", 50, 1, 1, 0, 0.1)]
    return ModeRun(mode, "/nonexistent", 0.0, 10.0, "timing held", 0.9, [job], ports, [])


def test_a_command_jobs_rows_are_its_completion_time_and_its_ranks_figures():
    s = parse_scenario(GOOD)
    s.jobs = [j for j in s.jobs if j.name == "train"]

    def run(mode: str, step_s: float, ok: bool = True) -> ModeRun:
        job = JobRecord("train", "command", 0.0, started=10.0, ended=40.0, ok=ok,
                        figures={"status": "ok" if ok else "failed", "step_s_p50": step_s, "step_s_p99": 2 * step_s,
                                 "step_s_n": 100})
        return ModeRun(mode, "/nonexistent", 0.0, 10.0, "timing held", 0.9, [job], [], [])

    runs = {"none": run("none", 0.4), "advice": run("advice", 0.3)}
    table = first_table(ScenarioResult(s, Path("/nonexistent"), runs))
    assert "| train: job completion time (s) | 30.0 | 30.0 | 1.00× |" in table
    assert "| train: step_s p50 | 0.400 | 0.300 | 0.75× |" in table
    assert "| train: step_s p99 | 0.800 | 0.600 | 0.75× |" in table


def test_first_table_puts_modes_side_by_side_with_the_ratio():
    s = parse_scenario(GOOD.split("  - {name: inc")[0])
    result = ScenarioResult(s, Path("/nonexistent"),
                            {"none": _run("none", 8.0, 63, 120, 20.0), "advice": _run("advice", 12.0, 3, 0, 13.0)})
    table = first_table(result)
    assert "| ar: busbw (Mbit/s) | 8.00 | 12.00 | 1.50× |" in table
    assert "| ar: job completion time (s) | 20.0 | 13.0 | 0.65× |" in table
    assert "| p99 queue, worst port, faithful windows (pkts) | 63 | 3 | 0.05× |" in table
    assert "| drops, all switch ports | 120 | 0 | 0.00× |" in table
    assert "none: s3:3→s1" in table


def test_a_gpus_nvlink_can_be_degraded_or_cut_in_a_scenario_and_a_made_up_one_is_refused():
    text = """
name: nv
modes: [none]
duration_s: 20
topology: {name: railopt, args: {servers: 2, gpus: 2, spines: 1}}
jobs:
  - {name: ar, kind: allreduce, hosts: [h1, h2, h3, h4], size: 64K, iters: 2}
faults:
  - {at_s: 2, kind: rate, link: [h3, srv2], mbps: 20}
  - {at_s: 4, kind: link_down, link: [srv1, h2]}
"""
    s = parse_scenario(text)
    assert [(f.fault.kind, f.fault.link, f.fault.mbps) for f in s.faults] == [
        ("rate", ("h3", "srv2"), 20.0), ("link_down", ("srv1", "h2"), 0.0)]
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.link: no link between h3 and srv1"):
        parse_scenario(text.replace("[h3, srv2]", "[h3, srv1]"), "bad.yaml")  # h3 is in srv2
