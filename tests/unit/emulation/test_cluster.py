"""Cluster mode's pieces without a network: the tunnel's command line, the run's ssh_config, the
`--servers NAME=[USER@]ADDRESS,...` option (errors naming the item)."""

from __future__ import annotations

import pytest

from emulation.cluster import VNI_BASE, VXLAN_PORT, ClusterError, Server, SshConfig, parse_servers, vxlan_argv


def test_a_vxlan_end_is_made_with_its_mtu_mac_vni_and_both_addresses():
    argv = vxlan_argv("s1-eth3", VNI_BASE + 7, "172.31.250.1", "172.31.250.2", "00:00:00:00:01:03", 9000)
    assert argv == ["ip", "link", "add", "s1-eth3", "mtu", "9000", "address", "00:00:00:00:01:03", "type", "vxlan",
                    "id", str(VNI_BASE + 7), "local", "172.31.250.1", "remote", "172.31.250.2",
                    "dstport", str(VXLAN_PORT)]
    assert "address" not in vxlan_argv("s1-eth3", 1, "a", "b", None, 1450)
    assert VNI_BASE + 7 < 2**24  # VXLAN's VNI is 24 bits


def test_the_runs_ssh_config_uses_its_own_key_and_known_hosts_and_never_the_agent(tmp_path):
    ssh = SshConfig(tmp_path)
    ssh.add(Server("srv2", "172.31.250.2"))
    text = ssh.path.read_text()
    assert "Host srv2 172.31.250.2" in text
    for line in (f"IdentityFile {ssh.key}", "IdentitiesOnly yes", f"UserKnownHostsFile {tmp_path / 'cluster'}",
                 "BatchMode yes", "ForwardAgent no", "ControlMaster auto"):
        assert line in text
    path = next(w for w in text.split() if w.endswith("-%C"))
    assert len(path) < 100  # a Unix socket path: at most 107 bytes, and ssh adds a suffix while it binds
    argv = ssh.ssh("srv2", ["ip", "link", "set", "x y", "up"])
    assert argv[:4] == ["ssh", "-F", str(ssh.path), "srv2"]
    assert argv[-1] == "ip link set 'x y' up"  # ssh joins its words for the far shell: quoted once here


def test_servers_are_named_and_reached_as_root_unless_a_user_is_given():
    assert parse_servers("srv2=192.168.56.12, gpu3=admin@10.9.0.3") == [
        Server("srv2", "192.168.56.12", "root"), Server("gpu3", "10.9.0.3", "admin")]


@pytest.mark.parametrize(("text", "says"), [
    ("srv2", r"'srv2' is not NAME=\[USER@\]ADDRESS"),
    ("srv2=", r"'srv2=' is not NAME=\[USER@\]ADDRESS"),
    ("Srv2=10.0.0.2", r"server name 'Srv2': 1-8 lower-case"),
    ("localhost=10.0.0.2", r"server name 'localhost'"),
    ("ns=10.0.0.2", r"server name 'ns'"),
    ("srv2=server2.lab", r"srv2: address 'server2.lab' is not an IPv4 address"),
    ("srv2=@10.0.0.2", r"srv2: empty user"),
    ("srv2=10.0.0.2,srv2=10.0.0.3", r"srv2 \(10.0.0.3\) is listed twice"),
    ("srv2=10.0.0.2,srv3=10.0.0.2", r"srv3 \(10.0.0.2\) is listed twice"),
])
def test_a_wrong_item_is_named(text, says):
    with pytest.raises(ClusterError, match=says):
        parse_servers(text)


def test_a_key_that_is_not_there_is_an_error_naming_it(tmp_path):
    with pytest.raises(ClusterError, match=r"--ssh-key .*nope: no such file"):
        SshConfig(tmp_path, tmp_path / "nope")


def test_each_run_has_its_own_shared_connections(tmp_path):
    # two runs to the same server never share a connection (ControlPath carries the run's tag)
    paths = []
    for name in ("run-a", "run-b"):
        ssh = SshConfig(tmp_path / name)
        ssh.add(Server("srv2", "10.0.0.2"))
        paths += [line.split()[1] for line in ssh.path.read_text().splitlines() if "ControlPath" in line]
    assert len(paths) == 2 and paths[0] != paths[1] and all(p.endswith("-%C") for p in paths)
    assert all(len(p.replace("%C", "x" * 40)) + 17 < 108 for p in paths)  # ssh adds a 17-byte suffix while binding
