"""Cluster mode's pieces without a network: the tunnel's command line, the run's ssh_config."""

from __future__ import annotations

from emulation.cluster import VNI_BASE, VXLAN_PORT, Server, SshConfig, vxlan_argv


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
    path = next(w for w in text.split() if w.endswith("/%C"))
    assert len(path) < 100  # a Unix socket path: at most 107 bytes, and ssh adds a suffix while it binds
    argv = ssh.ssh("srv2", ["ip", "link", "set", "x y", "up"])
    assert argv[:4] == ["ssh", "-F", str(ssh.path), "srv2"]
    assert argv[-1] == "ip link set 'x y' up"  # ssh joins its words for the far shell: quoted once here
