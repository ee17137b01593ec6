"""The user's door: `python -m testbed run` opens a Mininet CLI; `echo exit | make run` comes up and down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from emulation.rundir import clean_run
from emulation.switchproc import bmv2_missing
from tests.integration.helpers import LEAFSPINE_LINK_PREFIXES, links_named, pid_alive

pytestmark = [pytest.mark.mininet, pytest.mark.root]

ROOT = Path(__file__).resolve().parents[2]
MAKE_RUN_CEILING_S = 90  # comes up and down in ~10 s here; the ceiling is for a loaded machine


def test_cli_pingall_and_queues_through_a_tty():
    child = pexpect.spawn(sys.executable, ["-m", "testbed", "run", "--topo", "leafspine", "--dataplane", "soft"],
                          cwd=ROOT, encoding="utf-8", timeout=60)
    run_dir = None
    try:
        child.expect("StarNet testbed: leafspine")
        child.expect("run directory: (\\S+)")
        run_dir = Path(child.match.group(1))
        child.expect_exact("mininet> ")
        child.sendline("pingall")
        child.expect(r"Results: (\d+)% dropped")
        assert child.match.group(1) == "0"
        child.expect_exact("mininet> ")
        child.sendline("queues s3")
        child.expect(r"s3: dropped \d+ \(")  # from the P4 counter drop_reason, over P4Runtime
        child.expect(r"port +5 s3-eth5")
        child.expect_exact("mininet> ")
        child.sendline("iperf h1 h5 3")
        child.expect(r"Results: ([\d.]+) Mbit/s received", timeout=30)
        assert float(child.match.group(1)) > 5, child.match.group(0)  # the command measures a real flow
        child.expect_exact("mininet> ")
        child.sendline("int s3")  # the flow just measured left INT reports: s3's uplink is in them
        child.expect(r"(\d+) INT reports")
        assert int(child.match.group(1)) > 0
        child.expect(r"s3 +[56] +(\d\.\d\d)")
        child.expect_exact("mininet> ")
        child.sendline("fidelity 30")  # the iperf3 flow crossed s3: it has windows with frames
        child.expect(r"s3 +switch +(\d+) +(\d+) +([\d.]+) +(\d+)")
        assert int(child.match.group(1)) > 0 and int(child.match.group(4)) > 0, child.match.group(0)
        child.expect(r"verdict: timing held in [\d.]+% of \d+ 100 ms windows")
        child.expect_exact("mininet> ")
        child.sendline("allreduce h1 h2 h5 h6 size=256K iters=1")  # ranks in the hosts, nccl-tests table
        child.expect(r"262144 +65536 +float +sum +ring", timeout=60)
        child.expect_exact("# Out of bounds values : 0 OK")
        child.expect_exact("mininet> ")
        child.sendline("allreduce h1 h99")
        child.expect_exact("allreduce: hosts: h99 not in topology")
        child.expect_exact("mininet> ")
        child.sendline("incast h5 h1 h6 size=256K")  # agents in the hosts, per-sender completion times
        child.expect(r"h1 -> h5 +262144 +\d+ +[\d.]+", timeout=60)
        child.expect(r"# incast: 2 of 2 senders -> h5 in \d+ ms")
        child.expect_exact("mininet> ")
        child.sendline("flows h1 h2 h9")
        child.expect_exact("flows: hosts: h9 not in topology")
        child.expect_exact("mininet> ")
        child.sendline("job h1 h5 -- sh -c 'echo rank $RANK of $WORLD_SIZE via $GLOO_SOCKET_IFNAME'")
        child.expect(r"1 +h5 +0 +ok +[\d.]+ +rank 1 of 2 via h5-eth0", timeout=30)  # your program, a rank per host
        child.expect_exact("mininet> ")
        child.sendline("job h1 h5 python3")
        child.expect_exact("job: give the program after ` -- `")
        child.expect_exact("mininet> ")
        child.sendline("jobs")
        child.expect(r"allreduce1: done, h1 h2 h5 h6; ring 262144 B busbw [\d.]+ Mbit/s, 0 wrong")
        child.expect(r"incast2: done, incast, 2 of 2 flows completed")
        child.expect(r"job3: ok: all 2 ranks exited 0")
        child.expect_exact("mininet> ")
        child.sendline("fail s3 s1")  # the controller's timeline row for the cut, as it comes
        child.expect(r"controller: s1-s3 down detected \d+ ms after, \d+ route updates written")
        child.expect_exact("mininet> ")
        child.sendline("restore s3 s1")
        child.expect(r"controller: s1-s3 up detected \d+ ms after")
        child.expect_exact("mininet> ")
        child.sendline("loss s1 s3 100")  # through the controller's SetLinkLoss
        child.expect_exact("s1 -> s3: 100% of frames lost")
        child.expect_exact("mininet> ")
        child.sendline("loss s1 s3 0")
        child.expect_exact("s1 -> s3: no injected loss")
        child.expect_exact("mininet> ")
        child.sendline("loss s1 s2 5")
        child.expect_exact("no link between s1 and s2")
        child.expect_exact("mininet> ")
        child.sendline("slow h2 20")  # a slow host: the faults file its ranks follow
        child.expect_exact("h2: its ranks take 20 ms longer per piece")
        child.expect_exact("mininet> ")
        assert json.loads((run_dir / "hosts" / "h2.faults.json").read_text()) == {"compute_delay_ms": 20.0}
        child.sendline("slow h2 0")
        child.expect_exact("h2: no added compute delay")
        child.expect_exact("mininet> ")
        child.sendline("slow h99 5")
        child.expect_exact("slow: no switch or host 'h99'")
        child.expect_exact("mininet> ")
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=30)
    finally:
        if child.isalive():  # a failed expectation: leave the CLI as a user would, then make sure
            child.sendline("exit")
            child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=30)
        child.close(force=True)
        if run_dir is not None:  # a testbed killed mid-way leaves its switches: the next tests need the names
            clean_run(run_dir)
    assert child.exitstatus == 0
    assert (run_dir / "controller.log").exists()
    assert links_named(LEAFSPINE_LINK_PREFIXES) == []


def test_make_run_without_tty_exits_zero_quickly():
    started = time.monotonic()
    result = subprocess.run("echo exit | make run", shell=True, cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "StarNet testbed: leafspine" in result.stdout + result.stderr
    print(f"echo exit | make run: {elapsed:.1f} s")
    assert elapsed < MAKE_RUN_CEILING_S, f"make run took {elapsed:.1f} s"
    assert links_named(LEAFSPINE_LINK_PREFIXES) == []


def test_a_testbed_killed_outright_is_cleaned_by_the_next_one_from_any_checkout(tmp_path):
    """SIGKILL (a session's end, the OOM killer) leaves the switch processes and their ports in the root
    namespace; the next testbed, whose runs are elsewhere (another clone: STARNET_RUNS), cleans them."""
    child = pexpect.spawn(sys.executable, ["-m", "testbed", "run", "--topo", "leafspine", "--dataplane", "soft"],
                          cwd=ROOT, encoding="utf-8", timeout=60)
    killed_run = None
    try:
        child.expect("run directory: (\\S+)")
        killed_run = Path(child.match.group(1))
        child.expect_exact("mininet> ")
        child.kill(9)
        child.wait()
        left = [line.split() for line in (p.read_text() for p in (killed_run / "pids").glob("switch-*.pid"))]
        assert left and all(pid_alive(int(pid), start) for pid, start in left)  # what the kill leaves
        assert links_named(LEAFSPINE_LINK_PREFIXES) != []
        result = subprocess.run("echo exit | make run", shell=True, cwd=ROOT, capture_output=True, text=True,
                                timeout=120, env={**os.environ, "STARNET_RUNS": str(tmp_path / "runs")})
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-3000:]
        assert f"cleaned what {killed_run} left (its owner is gone)" in out
        assert not any(pid_alive(int(pid), start) for pid, start in left)
        assert links_named(LEAFSPINE_LINK_PREFIXES) == []
    finally:
        child.close(force=True)
        if killed_run is not None:
            clean_run(killed_run)


@pytest.mark.skipif(not bmv2_missing(), reason="BMv2 is installed here: the fail-fast path cannot be shown")
def test_make_run_bmv2_without_bmv2_fails_fast_naming_the_binary():
    started = time.monotonic()
    result = subprocess.run("make run DATAPLANE=bmv2 </dev/null", shell=True, cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "simple_switch_grpc" in result.stderr
    assert time.monotonic() - started < 30
    assert links_named(LEAFSPINE_LINK_PREFIXES) == []


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is not None, reason="p4c is installed here")
def test_make_p4_without_p4c_says_so_and_fails():
    result = subprocess.run(["make", "p4"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "p4c-bm2-ss not found" in result.stderr
