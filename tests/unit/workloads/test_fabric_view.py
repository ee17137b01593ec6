"""A job started from another process than the testbed's (`python -m workloads.allreduce` beside `make
run`) reads the running testbed from its run directory; in cluster mode it says which hosts it cannot reach."""

from __future__ import annotations

import json
import os

import pytest

from topologies import leafspine
from wire import runfiles
from workloads.fabric import FabricView
from workloads.hosts import JobError


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / runfiles.TOPOLOGY).write_text(leafspine().to_yaml())
    (tmp_path / runfiles.PIDS).mkdir()
    for host in ("h1", "h2"):  # this machine's hosts: their PIDs recorded here
        (tmp_path / runfiles.PIDS / f"host-{host}.pid").write_text(f"{os.getpid()} 0\n")
    return tmp_path


def test_hosts_of_this_machine_are_found_by_their_recorded_pids(run_dir):
    view = FabricView.of_run_dir(run_dir)
    assert [ep.name for ep in view.endpoints(["h2", "h1"], order="given")] == ["h2", "h1"]
    with pytest.raises(JobError, match=r"hosts: h3 not running in"):
        view.endpoints(["h1", "h3"])


def test_hosts_on_another_server_are_named_with_their_server(run_dir):
    (run_dir / runfiles.CLUSTER_DIR).mkdir()
    (run_dir / runfiles.PLACEMENT).write_text(json.dumps({"h1": "localhost", "h2": "localhost", "h5": "srv2"}))
    view = FabricView.of_run_dir(run_dir)
    with pytest.raises(JobError, match=r"hosts: h5 on srv2 \(cluster mode\): a job over hosts of other servers "
                                       r"starts from the testbed's own CLI"):
        view.endpoints(["h1", "h5"])
