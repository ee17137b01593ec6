"""vm/provision.sh on this Debian machine, where p4lang publishes nothing and its repository cannot be
reached: it completes what it can (Debian packages, the venv), says exactly what it could not
install and why, exits 3 (soft data plane only), adds no package source, and `make run` still works."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.helpers import LEAFSPINE_LINK_PREFIXES, links_named

pytestmark = [pytest.mark.root, pytest.mark.mininet]

ROOT = Path(__file__).resolve().parents[2]
PARTIAL = 3  # the script's exit status when only the BMv2 toolchain is missing


def without_bmv2() -> dict[str, str]:
    """This environment without a source-built BMv2 on PATH (a developer's; CI has none)."""
    return {**os.environ, "PATH": ":".join(p for p in os.environ["PATH"].split(":") if "build-p4" not in p)}


def provision(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "vm/provision.sh", str(ROOT)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env={**without_bmv2(), **env})


def sources() -> list[str]:
    return sorted(p.name for p in Path("/etc/apt/sources.list.d").iterdir())


@pytest.mark.parametrize(("env", "reason"), [
    ({}, "p4lang publishes no packages for debian"),
    ({"PROVISION_OS": "ubuntu 22.04", "P4LANG_OBS": "http://127.0.0.1:9/p4lang"},
     "p4lang's repository is unreachable or has no Ubuntu 22.04 release (http://127.0.0.1:9/p4lang/xUbuntu_22.04/Release)"),
])
def test_provisioning_without_p4lang_packages_reports_them_and_leaves_the_soft_testbed(env, reason):
    before = sources()
    result = provision(**env)
    out = result.stdout + result.stderr
    assert result.returncode == PARTIAL, out
    assert reason in out, out
    for tool in ("mininet", "iperf3", "project venv"):  # what it could install is there, with versions
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(tool))
        assert "MISSING" not in line, line
    assert "p4c-bm2-ss: not on PATH" in out and "simple_switch_grpc: not on PATH" in out
    assert "soft data plane" in out
    assert sources() == before, "a package source was added"
    started = time.monotonic()
    run = subprocess.run("echo exit | make run DATAPLANE=auto", shell=True, cwd=ROOT, capture_output=True,
                         text=True, timeout=180, env=without_bmv2())
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "soft" in run.stdout + run.stderr
    print(f"\n  provision exit {result.returncode}; echo exit | make run: {time.monotonic() - started:.1f} s")
    assert links_named(LEAFSPINE_LINK_PREFIXES) == []
