"""Cluster mode's ground floor on one machine: a second server as a network namespace with its own sshd,
Mininet's cluster engine reaching it over SSH, and a VXLAN tunnel joining a host here to a host there
at the fabric's 9000-byte MTU — then nothing left on either side."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mininet.net import Mininet
from mininet.node import Host

from emulation.cluster import (
    ClusterError,
    ClusterNodeMixin,
    NamespaceServer,
    ServerSpawner,
    SocketForward,
    SshConfig,
    VxlanLink,
)
from emulation.rundir import clean_run, new_run_dir
from emulation.spawn import LocalSpawner
from emulation.switchproc import SoftSwitchProcess
from emulation.waiting import wait_until

pytestmark = [pytest.mark.root, pytest.mark.mininet]


class ClusterHost(ClusterNodeMixin, Host):
    pass


def netns_of(pid: int) -> str:
    return Path(f"/proc/{pid}/ns/net").readlink().name


def rtt_ms(node: Host, address: str) -> float:
    out = node.cmd(f"ping -c 20 -i 0.05 -q {address}")
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    assert m, out
    return float(m.group(1))


@pytest.fixture(scope="module")
def server():
    run_dir = new_run_dir("cluster-test")
    ssh = SshConfig(run_dir)
    srv = NamespaceServer(run_dir, LocalSpawner(run_dir), ssh)
    srv.start()
    yield srv
    srv.stop()


def test_the_namespace_server_is_reached_by_ssh_and_listens_on_its_own_address_only(server):
    where = server.ssh.run(server.name, ["readlink", "/proc/self/ns/net"]).strip()
    assert where == f"net:[{Path(f'/run/netns/{server.ns}').stat().st_ino}]"
    listening = subprocess.run(["ip", "netns", "exec", server.ns, "ss", "-Hltn"], capture_output=True, text=True,
                               check=True).stdout.split("\n")
    assert [line.split()[3] for line in listening if line.strip()] == [f"{server.address}:22"]


def test_a_vxlan_link_joins_a_host_here_to_one_on_the_server_at_the_fabric_mtu(server):
    net = Mininet(topo=None, controller=None, build=False, link=VxlanLink)
    try:
        here = net.addHost("h1", cls=ClusterHost, server="localhost", ip="10.0.0.1/24")
        there = net.addHost("h2", cls=ClusterHost, server=server.name, serverIP=server.address,
                            ssh_config=server.ssh.path, ip="10.0.0.2/24")
        local = net.addHost("h3", cls=ClusterHost, server="localhost", ip="10.0.1.3/24")
        tunnel = net.addLink(here, there, mtu=9000)
        net.addLink(here, local, params1={"ip": "10.0.1.1/24"})
        net.build()
        assert tunnel.vni is not None
        # each end tunnels to the other's address (unicast alone would pass without: VXLAN learns the far
        # MAC from what arrives, and only broadcasts — ARP, link probes — went astray when the end on the
        # server tunnelled to itself)
        assert f"remote {server.address} local {server.gateway}" in here.cmd("ip -d link show h1-eth0")
        assert f"remote {server.gateway} local {server.address}" in there.cmd("ip -d link show h2-eth0")
        # h2's shell runs in the server's namespace's child, not here: its namespace is not h1's nor ours
        assert len({netns_of(here.pid), netns_of(os.getpid())} | {there.cmd("readlink /proc/self/ns/net").strip()}) == 3
        out = here.cmd("ping -c 3 -i 0.1 -W 2 -s 8900 -M do 10.0.0.2")  # a 8928-byte frame, not fragmented
        assert " 0% packet loss" in out, out
        # the tunnel adds little over a veth pair here (a goal of 0.5 ms; a margin for a busy machine)
        assert rtt_ms(here, "10.0.0.2") - rtt_ms(here, "10.0.1.3") < 2.0
    finally:
        net.stop()


def test_a_fabric_mtu_the_underlay_cannot_carry_is_refused_naming_the_link(server):
    net = Mininet(topo=None, controller=None, build=False, link=VxlanLink)
    try:
        here = net.addHost("h1", cls=ClusterHost, server="localhost")
        there = net.addHost("h2", cls=ClusterHost, server=server.name, serverIP=server.address,
                            ssh_config=server.ssh.path)
        with pytest.raises(ClusterError, match=r"link h1-h2: MTU 9100 does not fit .*at most 9050"):
            net.addLink(here, there, mtu=9100)
        assert "h1-eth0" not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    finally:
        net.stop()


def test_a_switch_on_the_server_answers_p4runtime_through_an_ssh_forwarded_socket_only(server):
    spawner = ServerSpawner(server.run_dir, server.ssh, server.name)
    there = Path(f"/run/starnet/{server.ns}-{os.getpid()}/s9.sock")  # the server's file system (here: ours)
    server.ssh.run(server.name, ["mkdir", "-p", str(there.parent)])
    forward = SocketForward(LocalSpawner(server.run_dir), server.ssh, server.name, server.run_dir / "p4rt-s9.sock",
                            there, "forward-s9")
    switch = SoftSwitchProcess("s9", 9, 0, server.run_dir, [], {}, fidelity=False, realtime_priority=20,
                               spawner=spawner, serve_on=f"unix:{there}", dial=forward.address)
    assert switch.command()[switch.command().index("--grpc-server-addr") + 1] == f"unix:{there}"
    switch.launch()
    pid, _ = spawner.remote["switch-s9"]
    try:
        assert netns_of(pid) == f"net:[{Path(f'/run/netns/{server.ns}').stat().st_ino}]"
        assert (server.run_dir / "remote-pids" / server.name / "switch-s9.pid").read_text().split()[0] == str(pid)
        assert wait_until(there.exists, 15.0), switch.log_path.read_text()
        forward.start()
        switch.wait_ready()  # Capabilities answered through the forward
        info = switch.describe()
        # promoted on the server, by its PID there: every thread of the switch, not the ssh session here
        assert info["grpc"] == forward.address and info["scheduling"] == "fifo 20"
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        assert tasks and all(os.sched_getscheduler(int(t.name)) == os.SCHED_FIFO for t in tasks)
        assert switch.proc is not None and os.sched_getscheduler(switch.proc.pid) == os.SCHED_OTHER
        assert info["remote"] == ["ssh", "-F", str(server.ssh.path), "-S", "none", server.name, "--"]
        # the prefix the controller's port-status stream uses runs a command line on the server
        done = subprocess.run([*info["remote"], "readlink /proc/self/ns/net"], capture_output=True, text=True,
                              timeout=30)
        assert done.stdout.strip() == f"net:[{Path(f'/run/netns/{server.ns}').stat().st_ino}]", done.stderr
    finally:
        forward.stop()
        switch.stop()
        shutil.rmtree(there.parent, ignore_errors=True)
    assert switch.proc is not None and switch.proc.returncode == 0  # it ended on SIGTERM, cleanly
    assert not Path(f"/proc/{pid}").exists()
    assert not list((server.run_dir / "remote-pids" / server.name).glob("*.pid"))
    assert not (server.run_dir / "p4rt-s9.sock").exists()


def test_make_clean_ends_what_a_dead_run_left_on_its_server_and_the_server(server):
    spawner = ServerSpawner(server.run_dir, server.ssh, server.name)
    proc = spawner.start("sleeper", ["sleep", "300"])
    pid, _ = spawner.remote["sleeper"]
    proc.kill()  # the run dies: its ssh session goes, the process on the server stays
    proc.wait()
    assert Path(f"/proc/{pid}").exists()
    done = clean_run(server.run_dir)
    assert f"ended sleeper on {server.name} (pid {pid})" in done
    assert wait_until(lambda: not Path(f"/proc/{pid}").exists(), 5.0)
    assert not Path(f"/run/netns/{server.ns}").exists()
    assert not Path(f"/sys/class/net/{server.uplink}").exists()
    assert not list((server.run_dir / "pids").glob("*.pid"))
    server.sshd = None  # clean_run ended it
    server.start()  # the module's fixture stops it


def test_nothing_is_left_when_the_server_stops(server):
    run_dir, ns, uplink = server.run_dir, server.ns, server.uplink
    server.stop()
    assert not Path(f"/run/netns/{ns}").exists()
    assert not Path(f"/sys/class/net/{uplink}").exists()
    assert not list((run_dir / "pids").glob("*.pid"))
    server.start()  # the module's fixture stops it again
