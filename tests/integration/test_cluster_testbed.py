"""Cluster mode end to end on one machine: the default fabric split between this machine and a namespace
server (`Testbed(servers="ns")`, `make run SERVERS=ns`) — switches and hosts started on their server,
leaf–spine links crossing as VXLAN tunnels, P4Runtime reached through SSH-forwarded sockets, the
controller programming every switch and hearing both servers' port carrier — and nothing left after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulation.net import Testbed
from emulation.waiting import wait_until
from topologies import leafspine
from wire import runfiles
from workloads.allreduce.job import JobSpec, run_job
from workloads.command.job import CommandSpec, run_command
from workloads.fabric import FabricView

pytestmark = [pytest.mark.mininet, pytest.mark.root]
RENDEZVOUS = str(Path(__file__).with_name("rendezvous.py"))
LINK_MBPS = 20.0
RING_FLOOR = 0.30  # tests/integration/test_allreduce.py's: a serialised ring runs at ~1/8 of the link


@pytest.fixture(scope="module")
def fabric():
    with Testbed(leafspine(), dataplane="soft", name="test-cluster-testbed", servers="ns") as tb:
        yield tb
        started = [label for spawner in tb.cluster.spawners.values() for label in spawner.remote]
    assert not Path(f"/run/netns/{tb.cluster.namespace_servers[0].ns}").exists()
    # what was started on the server (its switches, its hosts' agents) was ended by the testbed, each by its
    # PID there, before the server itself went
    assert {label.split("-")[0] for label in started} >= {"switch", "agent"}, started
    assert [label for spawner in tb.cluster.spawners.values() for label in spawner.remote] == []
    assert not list((tb.run_dir / runfiles.REMOTE_PIDS).glob("*/*.pid"))
    assert not runfiles.cluster_sockets(tb.run_dir).exists()


def there(cluster, script: str) -> str:
    """A shell command line's output on srv2 (its PIDs are its own: asked there)."""
    return cluster.ssh.run("srv2", ["sh", "-c", script]).strip()


def fifo_there(cluster, pid: int) -> bool:
    return there(cluster, f"chrt -p {pid} | head -1").endswith("SCHED_FIFO")


def test_the_fabric_is_split_between_both_servers(fabric):
    cluster = fabric.cluster
    where = {node: cluster.server_of[node] for node in [*(s.name for s in fabric.topo.switches),
                                                        *(h.name for h in fabric.topo.hosts)]}
    assert set(where.values()) == {"localhost", "srv2"}, where
    assert json.loads((fabric.run_dir / runfiles.PLACEMENT).read_text()) == cluster.server_of  # for other processes
    for sw in fabric.topo.switches:  # a leaf with its hosts: only switch-to-switch links cross
        for n, _ in fabric.topo.neighbours(sw.name):
            if fabric.topo.is_host(n):
                assert where[n] == where[sw.name]
    info = json.loads((fabric.run_dir / runfiles.SWITCHES).read_text())["switches"]
    ns = f"net:[{Path(f'/run/netns/{cluster.namespace_servers[0].ns}').stat().st_ino}]"
    for name, sw in info.items():
        assert sw["scheduling"].startswith("fifo"), (name, sw["scheduling"])  # real-time on either server
        if where[name] == "srv2":
            assert sw["grpc"].startswith("unix:") and sw["remote"][-2:] == ["srv2", "--"]
            pid, _ = cluster.spawners["srv2"].remote[f"switch-{name}"]
            assert there(cluster, f"readlink /proc/{pid}/ns/net") == ns  # it runs on the server
            assert fifo_there(cluster, pid)  # promoted there, by its PID there
        else:
            assert sw["grpc"].startswith("127.0.0.1:") and "remote" not in sw
    # the control plane's processes on the server too, and a watchdog on each server watching its own
    agents = {label: pid for label, (pid, _) in cluster.spawners["srv2"].remote.items() if label.startswith("agent-")}
    assert agents and all(fifo_there(cluster, pid) for pid in agents.values()), agents
    # they reach the controller at the address it wrote, forwarded to the same path there
    address = (fabric.run_dir / runfiles.CONTROLLER_ADDR).read_text().strip()
    assert address == f"unix:{runfiles.cluster_sockets(fabric.run_dir) / runfiles.CONTROLLER_SOCK}"
    assert there(cluster, f"test -S {address.removeprefix('unix:')} && echo forwarded") == "forwarded"
    assert all("registered" in (fabric.run_dir / "hostagents" / f"{label.removeprefix('agent-')}.log").read_text()
               for label in agents)
    assert set(fabric.rtwatch) == {"rtwatch", "rtwatch-srv2"}
    watching = (fabric.run_dir / "rtwatch-srv2.log").read_text().split("(")[0].removeprefix("watching ").split(", ")
    on_srv2 = sorted(node for node, server in where.items() if server == "srv2")
    assert sorted(w.strip() for w in watching) == on_srv2, (watching, on_srv2)  # its switches and its hosts' agents
    crossing = [link for link in fabric.topo.links if where[link.a] != where[link.b]]
    assert crossing
    link = crossing[0]
    local_end = link.a if where[link.a] == "localhost" else link.b
    port = link.port_of(local_end)
    details = subprocess.run(["ip", "-d", "link", "show", f"{local_end}-eth{port}"], capture_output=True, text=True,
                             check=True).stdout
    assert "vxlan id" in details and "mtu 9000" in details, details


def test_every_host_reaches_every_other_across_the_servers(fabric):
    assert fabric.net.pingAll(timeout="2") == 0.0


def test_a_cut_crossing_link_is_heard_from_the_far_server_and_healed(fabric):
    cluster = fabric.cluster
    crossing = [link for link in fabric.topo.links if cluster.server_of[link.a] != cluster.server_of[link.b]]
    link = crossing[0]
    fabric.set_link(link.a, link.b, up=False)
    try:
        names = {f"{link.a}-{link.b}", f"{link.b}-{link.a}"}
        assert wait_until(lambda: any(r["link"] in names and r["state"] == "down" for r in fabric.links_timeline()),
                          15.0), fabric.links_timeline()
        assert fabric.net.pingAll(timeout="2") == 0.0  # re-routed over the other spine
    finally:
        fabric.set_link(link.a, link.b, up=True)
    assert wait_until(lambda: any(r["link"] in names and r["state"] == "up" for r in fabric.links_timeline()), 15.0)


def test_an_all_reduce_over_both_servers_is_exact(fabric):
    t0 = fabric.now()
    outcome = run_job(JobSpec(hosts=[f"h{i}" for i in range(1, 9)], sizes=[4 << 20], algo="ring", iters=2, warmup=1,
                              name="ring-split"), FabricView.of_testbed(fabric), progress=None)
    verdict = fabric.verdict(t0, fabric.now())
    (result,) = outcome.results
    busbw = result.busbw_gbs * 8e3
    print(f"\n{outcome.table}\n  ring over both servers: busbw {busbw:.2f} Mbit/s = {busbw / LINK_MBPS:.0%} of the "
          f"link; {verdict.line()}")
    assert outcome.wrong == 0, outcome.table
    assert busbw >= RING_FLOOR * LINK_MBPS, outcome.table
    # the verdict says where each server's CPU went, sampled there (its switches, its ranks)
    there = verdict.cpu_servers["srv2"]
    assert there.by_kind.get("switches", 0) > 0 and there.by_kind.get("workloads", 0) > 0, verdict.line()
    assert "on srv2: CPU: the testbed used" in verdict.line()


def test_a_program_of_your_own_runs_on_both_servers_and_a_failing_rank_ends_them_there(fabric):
    # `job` (workloads/command) over hosts of both servers: each rank started on its host's server, a
    # meeting at rank 0 over the fabric, then rank 2 (on srv2) fails and every rank is ended with what it
    # started (the sleeps), on its own server
    cluster = fabric.cluster
    local = [h.name for h in fabric.topo.hosts if cluster.is_local(h.name)][:2]
    remote = [h.name for h in fabric.topo.hosts if not cluster.is_local(h.name)][:2]
    meet = run_command(CommandSpec(argv=["{python}", RENDEZVOUS], hosts=local + remote, name="meet-split",
                                   timeout_s=60), FabricView.of_testbed(fabric), progress=None)
    assert meet.ok, meet.table + "\n" + meet.failure_tails()
    spec = CommandSpec(argv=["sh", "-c", f"sleep 300 & exec {sys.executable} {RENDEZVOUS} --fail-rank 2"],
                       hosts=local + remote, name="fail-split", timeout_s=60, grace_s=2)
    outcome = run_command(spec, FabricView.of_testbed(fabric), progress=None)
    assert outcome.status == "failed" and f"rank 2 ({remote[0]}) exited 7" in outcome.reason, outcome.table
    assert wait_until(lambda: there(cluster, "pgrep -x sleep || echo none") == "none", 10.0), \
        there(cluster, "ps -eo pid,pgid,args")
    assert not list((fabric.run_dir / runfiles.REMOTE_PIDS / "srv2").glob("rank-*"))
