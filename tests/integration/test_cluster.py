"""Cluster mode's ground floor on one machine: a second server as a network namespace with its own sshd,
Mininet's cluster engine reaching it over SSH, and a VXLAN tunnel joining a host here to a host there
at the fabric's 9000-byte MTU — then nothing left on either side."""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mininet.net import Mininet
from mininet.node import Host

from emulation.cluster import (
    Cluster,
    ClusterError,
    ClusterNodeMixin,
    NamespaceServer,
    ServerSpawner,
    SocketForward,
    SshConfig,
    VxlanLink,
    parse_servers,
)
from emulation.rundir import clean_run, new_run_dir
from emulation.spawn import LocalSpawner
from emulation.switchproc import SoftSwitchProcess
from emulation.waiting import wait_until
from topologies import leafspine

pytestmark = [pytest.mark.root, pytest.mark.mininet]


class ClusterHost(ClusterNodeMixin, Host):
    pass


def netns_of(pid: int) -> str:
    return Path(f"/proc/{pid}/ns/net").readlink().name


def there(server: NamespaceServer, script: str) -> str:
    """A shell command line's output on the server (its own PIDs, its own /run/starnet: asked there)."""
    done = subprocess.run(server.ssh.ssh(server.name, ["sh", "-c", script]), capture_output=True, text=True,
                          timeout=30)
    return done.stdout.strip() if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()}"


def server_netns(server: NamespaceServer) -> str:
    return f"net:[{Path(f'/run/netns/{server.ns}').stat().st_ino}]"


def root_pid(server: NamespaceServer, pid: int) -> int | None:
    """This machine's PID of the server's process `pid` (NSpid: the PID in each namespace, outermost first)."""
    listed = subprocess.run(["ip", "netns", "pids", server.ns], capture_output=True, text=True).stdout.split()
    for candidate in listed:
        try:
            nspid = [line for line in Path(f"/proc/{candidate}/status").read_text().splitlines()
                     if line.startswith("NSpid:")][0].split()[1:]
        except (OSError, IndexError):
            continue
        if nspid[-1] == str(pid) and len(nspid) > 1:
            return int(candidate)
    return None


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


def test_the_server_is_a_machine_of_its_own_but_for_the_shared_run_directory(server):
    # its own PIDs (sshd the first) and /run/starnet; the run directory shared (a file written here is read
    # there, and one written there is read here), but no Unix socket of this machine is reached through it
    assert there(server, "cat /proc/1/comm") == "sshd"
    assert there(server, "echo $$").isdigit() and int(there(server, "echo $$")) < 1000
    mine = Path("/run/starnet") / f"here-{os.getpid()}"
    mine.mkdir(parents=True, exist_ok=True)
    try:
        assert there(server, f"test -e {mine} && echo seen || echo absent") == "absent"
    finally:
        mine.rmdir()
    (server.run_dir / "from-here.txt").write_text("here\n")
    assert there(server, f"cat {server.run_dir / 'from-here.txt'}") == "here"
    there(server, f"echo there > {server.run_dir / 'from-there.txt'}")
    assert (server.run_dir / "from-there.txt").read_text() == "there\n"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(server.run_dir / "here.sock"))
        listening.listen()
        probe = (f"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"print(s.connect_ex({str(server.run_dir / 'here.sock')!r}))")
        assert there(server, f"{sys.executable} -c {shlex.quote(probe)}") == str(errno.ECONNREFUSED)
    (server.run_dir / "here.sock").unlink()


def test_a_socket_served_here_is_reached_at_the_same_path_on_the_server(server):
    spawner = ServerSpawner(server.run_dir, server.ssh, server.name)
    path = Path("/run/starnet") / f"shared-{os.getpid()}" / "api.sock"
    path.parent.mkdir(parents=True, exist_ok=True)
    there(server, f"mkdir -p {path.parent}")
    try:
        with socket.socket(socket.AF_UNIX) as listening:
            listening.bind(str(path))
            listening.listen()
            undo = spawner.share("api", path)
            try:
                reply = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(path)!r}); s.sendall(b'hi')"
                assert there(server, f"{sys.executable} -c {shlex.quote(reply)}") == ""
                conn, _ = listening.accept()
                with conn:
                    assert conn.recv(2) == b"hi"
            finally:
                undo()
            assert there(server, f"test -S {path} && echo left || echo gone") == "gone"
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
        there(server, f"rm -rf {path.parent}")
    assert not list((server.run_dir / "pids").glob("share-*.pid"))


def test_a_switch_on_the_server_answers_p4runtime_through_an_ssh_forwarded_socket_only(server):
    spawner = ServerSpawner(server.run_dir, server.ssh, server.name)
    sock = Path(f"/run/starnet/{server.ns}-{os.getpid()}/s9.sock")  # on the server's own /run/starnet
    server.ssh.run(server.name, ["mkdir", "-p", str(sock.parent)])
    forward = SocketForward(LocalSpawner(server.run_dir), server.ssh, server.name, server.run_dir / "p4rt-s9.sock",
                            sock, "forward-s9")
    switch = SoftSwitchProcess("s9", 9, 0, server.run_dir, [], {}, fidelity=False, realtime_priority=20,
                               spawner=spawner, serve_on=f"unix:{sock}", dial=forward.address)
    assert switch.command()[switch.command().index("--grpc-server-addr") + 1] == f"unix:{sock}"
    switch.launch()
    pid, _ = spawner.remote["switch-s9"]
    try:
        assert there(server, f"readlink /proc/{pid}/ns/net") == server_netns(server)
        assert (server.run_dir / "remote-pids" / server.name / "switch-s9.pid").read_text().split()[0] == str(pid)
        assert wait_until(lambda: there(server, f"test -S {sock} && echo up") == "up", 15.0), \
            switch.log_path.read_text()
        assert not sock.exists()  # not on this machine's /run/starnet
        forward.start()
        switch.wait_ready()  # Capabilities answered through the forward
        info = switch.describe()
        # promoted on the server, by its PID there: every thread of the switch, not the ssh session here
        assert info["grpc"] == forward.address and info["scheduling"] == "fifo 20"
        policies = there(server, f"for t in /proc/{pid}/task/*; do chrt -p ${{t##*/}} | head -1; done").splitlines()
        assert policies and all(line.endswith("SCHED_FIFO") for line in policies), policies
        assert switch.proc is not None and os.sched_getscheduler(switch.proc.pid) == os.SCHED_OTHER
        assert info["remote"] == ["ssh", "-F", str(server.ssh.path), "-S", "none", server.name, "--"]
        # the prefix the controller's port-status stream uses runs a command line on the server
        done = subprocess.run([*info["remote"], "readlink /proc/self/ns/net"], capture_output=True, text=True,
                              timeout=30)
        assert done.stdout.strip() == server_netns(server), done.stderr
    finally:
        forward.stop()
        switch.stop()
        there(server, f"rm -rf {sock.parent}")
    assert switch.proc is not None and switch.proc.returncode == 0  # it ended on SIGTERM, cleanly
    assert there(server, f"test -e /proc/{pid} && echo left || echo gone") == "gone"
    assert not list((server.run_dir / "remote-pids" / server.name).glob("*.pid"))
    assert not (server.run_dir / "p4rt-s9.sock").exists()


def test_a_process_on_the_server_is_ended_with_what_it_started(server):
    spawner = ServerSpawner(server.run_dir, server.ssh, server.name)
    proc = spawner.start("worker", ["sh", "-c", "trap '' TERM; sleep 300 & sleep 301 & wait"])
    pid, _ = spawner.remote["worker"]
    assert wait_until(lambda: len(there(server, f"pgrep -g {pid}").split()) == 3, 10.0)  # sh and its two sleeps
    spawner.stop("worker", proc, grace_s=0.5)  # sh ignores SIGTERM: KILLed after the grace, its group with it
    assert there(server, f"pgrep -g {pid} || echo none") == "none"


def test_make_clean_ends_what_a_dead_run_left_on_its_server_and_the_server(server):
    spawner = ServerSpawner(server.run_dir, server.ssh, server.name)
    proc = spawner.start("sleeper", ["sleep", "300"])
    pid, _ = spawner.remote["sleeper"]
    proc.kill()  # the run dies: its ssh session goes, the process on the server stays
    proc.wait()
    here = root_pid(server, pid)
    assert here is not None and Path(f"/proc/{here}").exists()
    done = clean_run(server.run_dir)
    assert f"ended sleeper on {server.name} (pid {pid})" in done
    assert wait_until(lambda: not Path(f"/proc/{here}").exists(), 5.0)
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


def test_machines_given_by_address_are_reached_with_the_key_they_authorize(server):
    # --servers NAME=ADDRESS (here the namespace server, as another machine would be): reached as root with
    # the key given, the run directory checked to be shared, the run's sockets directory made and removed
    run_dir = new_run_dir("cluster-servers-test")
    try:
        with pytest.raises(ClusterError, match="--ssh-key"):
            Cluster.on_servers(run_dir, LocalSpawner(run_dir), leafspine(), parse_servers(f"srv9={server.address}"),
                               None)
        cluster = Cluster.on_servers(run_dir, LocalSpawner(run_dir), leafspine(),
                                     parse_servers(f"srv9=root@{server.address}"), server.ssh.key)
        assert set(cluster.server_of.values()) == {"localhost", "srv9"}
        cluster.start()
        try:
            assert cluster.ssh.run("srv9", ["readlink", "/proc/self/ns/net"]).strip() == server_netns(server)
            assert there(server, f"test -d {cluster.sockets} && echo made") == "made"
        finally:
            cluster.stop()
        assert there(server, f"test -d {cluster.sockets} || echo gone") == "gone"
        stranger = run_dir / "stranger"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
        refused = Cluster.on_servers(run_dir, LocalSpawner(run_dir), leafspine(),
                                     parse_servers(f"srv9={server.address}"), stranger)
        with pytest.raises(ClusterError, match=rf"srv9 \(root@{server.address}\) cannot be reached by SSH with "
                                               rf"{stranger}: .*Permission denied"):
            refused.start()
        refused.stop()
    finally:
        clean_run(run_dir)
