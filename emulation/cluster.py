"""Cluster mode's pieces (issue "Cluster mode"): servers reached over SSH, the links that cross them,
and a second server on this machine for tests — on Mininet's own cluster engine
(`mininet.examples.cluster`, Debian's mininet package), subclassed here, never patched.

- `Server`: a machine of the cluster as SSH reaches it (its address on the experiment network, its
  user), and `SshConfig`, the one ssh_config file every ssh of a run reads (key, known hosts of its
  own, a shared connection per server), so nothing in the user's ~/.ssh is needed or changed.
- `VxlanLink`: a link between nodes on two servers as a VXLAN tunnel. Mininet's `RemoteGRELink`
  uses gretap, which this kernel does not have (CONFIG_NET_IPGRE is unset; VXLAN is built in);
  `RemoteSSHLink` runs a process per link. A VXLAN end keeps its UDP socket in the namespace it was
  made in (the server's root namespace) when it moves into its node's, so it is made there and
  moved, as gretap is. Its MTU is the underlay's less VXLAN's 50 bytes; `VxlanLink` refuses a
  fabric MTU larger than that (an INT frame that does not fit would be dropped silently on the way).
- `NamespaceServer`: a "server" on this machine — a network namespace of the run's own, joined to the
  root namespace by a veth, with its own sshd bound to its address there, its own PIDs and its own
  /run/starnet, and the run directory seen through bindfs (FUSE) as over NFS — so the cluster code runs
  exactly as across two machines (the same SSH, the same tunnels; no PID, no Unix socket of this machine
  reached there), in `make test`. Everything it makes is recorded in the run directory (the namespace,
  the veth, sshd's PID): `make clean` ends it, and all that runs there with it.
- `Cluster`: the testbed's fabric over servers (emulation/net.py, `servers=`): where each node runs
  (emulation/placement.py), the Mininet node classes for it (`CLUSTER_NODES`: a node on another server
  runs its shell there; a switch there prepares its ports there, serves P4Runtime on a Unix socket there,
  reached here through `SocketForward`), and `ClusterSpawner`, which starts a host's processes on the
  host's server and shares a Unix socket served here (the controller's advice API, a job's control socket)
  at the same path on every server (`ssh -R`, in `cluster_sockets`: /run/starnet/cluster-<run>/).
  Servers need the project (with its venv) at the same path and the run directory shared, as NFS
  shares it: the servers' processes write their logs and records there; `Cluster.start` checks it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import json
import os
import re
import selectors
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mininet.examples.cluster import RemoteLink, RemoteMixin
from mininet.link import Link

from emulation.nodes import BMv2Switch, NodeClasses, SoftP4Switch, StarHost, run_checked, switch_intf_script
from emulation.placement import place
from emulation.rundir import (
    CONTROL_DIR,
    PROJECT_ROOT,
    START_TIME,
    control_dir,
    end_namespace_processes,
    end_remote_process,
    record_interfaces,
    record_netns,
    remote_command,
    remote_prefix,
    still_running,
)
from emulation.spawn import LocalSpawner, Spawner
from emulation.waiting import wait_until
from topologies.spec import Topology
from wire import runfiles
from wire.realtime import RealtimeError
from wire.runfiles import RUN_STARNET, cluster_sockets

VXLAN_PORT = 4789  # IANA's
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
VNI_BASE = 0x5A0000  # VNIs of this project's tunnels: base + a counter (24 bits)
SSHD = "/usr/sbin/sshd"


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class Server:
    name: str  # as nodes name their server (`server=`)
    address: str  # on the experiment network: where SSH and the tunnels reach it
    user: str = "root"


SERVER_NAME = re.compile(r"[a-z][a-z0-9]{0,7}")  # short: it prefixes the server's logs and records
SERVERS_FORMAT = "NAME=[USER@]ADDRESS[,NAME=[USER@]ADDRESS...]"


DEFAULT_SSH_KEY = Path("/etc/starnet/cluster_key")  # vm/provision.sh's, on the cluster's VMs


def default_ssh_key() -> Path | None:
    """The key cluster mode on machines uses when none is given: $STARNET_SSH_KEY, else DEFAULT_SSH_KEY."""
    given = os.environ.get("STARNET_SSH_KEY")
    if given:
        return Path(given)
    return DEFAULT_SSH_KEY if DEFAULT_SSH_KEY.exists() else None


def parse_servers(text: str) -> list[Server]:
    """`--servers srv2=10.9.0.2,srv3=root@10.9.0.3`: the machines other than this one, each named (as
    placements and logs name it) and reached at its address on the experiment network (IPv4: the
    tunnels' underlay). ClusterError naming the item that is wrong."""
    servers: list[Server] = []
    for item in text.split(","):
        name, eq, target = item.strip().partition("=")
        user, at, address = target.rpartition("@")
        if not eq or not address:
            raise ClusterError(f"--servers: {item.strip()!r} is not NAME=[USER@]ADDRESS (--servers {SERVERS_FORMAT}, "
                               "or 'ns')")
        if not SERVER_NAME.fullmatch(name) or name in ("localhost", "ns"):
            raise ClusterError(f"--servers: server name {name!r}: 1-8 lower-case letters and digits, a letter "
                               "first, not 'localhost' or 'ns'")
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise ClusterError(f"--servers: {name}: address {address!r} is not an IPv4 address (the tunnels' "
                               "underlay; a name would resolve differently on each machine)") from None
        if at and not user:
            raise ClusterError(f"--servers: {name}: empty user before '@'")
        if any(s.name == name for s in servers) or any(s.address == address for s in servers):
            raise ClusterError(f"--servers: {name} ({address}) is listed twice")
        servers.append(Server(name, address, user or "root"))
    return servers


class SshConfig:
    """One ssh_config for a run: a key of the run's own, known hosts of its own (a server's host key
    accepted the first time: the run made the server or was told its address), no agent, no password,
    one shared connection per server (ControlMaster) so a command costs a round trip, not a handshake."""

    def __init__(self, run_dir: Path, key: Path | None = None) -> None:
        self.run_dir = run_dir
        self.dir = run_dir / runfiles.CLUSTER_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        if key is not None and not key.is_file():
            raise ClusterError(f"--ssh-key {key}: no such file (the private key the servers authorize for root)")
        self.key = key or self.dir / "id_ed25519"  # given: real servers', authorized there beforehand
        self.path = run_dir / runfiles.SSH_CONFIG
        self.servers: dict[str, Server] = {}
        self.run_tag = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]

    def ensure_key(self) -> Path:
        if not self.key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "starnet cluster", "-f", str(self.key)])
        return self.key.with_suffix(".pub")

    def add(self, server: Server) -> None:
        self.servers[server.name] = server
        self.write()

    def write(self) -> None:
        lines = []
        for s in self.servers.values():
            # ControlPath: a socket path must stay under 108 bytes; %C is a short hash of the connection,
            # after the run's own (another run's connection to the same server, made with another key, is
            # never reused; closing this run's closes only its own)
            lines += [f"Host {s.name} {s.address}", f"  HostName {s.address}", f"  User {s.user}",
                      f"  IdentityFile {self.key}", "  IdentitiesOnly yes",
                      f"  UserKnownHostsFile {self.dir / 'known_hosts'}", "  StrictHostKeyChecking accept-new",
                      "  BatchMode yes", "  ForwardAgent no", "  ControlMaster auto",
                      f"  ControlPath {CONTROL_DIR}/{self.run_tag}-%C", "  ControlPersist 60", "  ConnectTimeout 5",
                      ""]
        self.path.write_text("\n".join(lines))

    def ssh(self, server: str, argv: list[str]) -> list[str]:
        """argv run on `server` by ssh (as one shell-quoted command line: ssh joins its arguments)."""
        return remote_command(self.run_dir, server, argv)

    def run(self, server: str, argv: list[str], timeout_s: float = 30.0) -> str:
        return run(self.ssh(server, argv), timeout_s)

    def close(self, server: str) -> None:
        """End the shared connection to `server` (else its master lingers ControlPersist seconds)."""
        subprocess.run(["ssh", "-F", str(self.path), "-O", "exit", server], capture_output=True, timeout=10)


def run(argv: list[str], timeout_s: float = 30.0) -> str:
    return run_checked(argv, error=ClusterError, timeout_s=timeout_s)


class ClusterNodeMixin(RemoteMixin):
    """Mininet's RemoteMixin with the run's ssh_config (`ssh_config=`): its key and known hosts, not the
    user's; a node on the server named 'localhost' (this machine) stays local, as in Mininet."""

    # Mininet detaches every process it starts for a node from the process group with a preexec_fn
    # (os.setpgrp), which makes Python fork() and run Python code in the child: in a process with gRPC's
    # threads (the testbed's, the tests'), that child ran gRPC's fork handlers and broke. The same
    # detachment without Python code in the child (process_group=0, and so vfork):
    _ignoreSignal = None  # noqa: N815 (Mininet's name)

    def __init__(self, name: str, *, ssh_config: Path | None = None, **kwargs: Any) -> None:
        if ssh_config is not None:
            self.sshbase = [*RemoteMixin.sshbase, "-F", str(ssh_config)]
            control_dir()
        super().__init__(name, **kwargs)

    def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:
        params.setdefault("process_group", 0)
        return super()._popen(cmd, sudo=sudo, tt=tt, **params)


class VxlanLink(RemoteLink):
    """A link whose ends may be on two servers (see the module's doc). Same server: Mininet's veth pair.
    `mtu=` the fabric's MTU on this link: refused if the tunnel cannot carry it."""

    _vni = itertools.count(1)
    tunnel: Any = None  # RemoteLink's: the VNI of a tunnel, None for a veth pair

    def __init__(self, node1: Any, node2: Any, mtu: int | None = None, **kwargs: Any) -> None:
        self.mtu = mtu
        self.vni: int | None = None
        super().__init__(node1, node2, **kwargs)

    def makeIntfPair(self, intfname1: str, intfname2: str, addr1: str | None = None,  # noqa: N802,N803 (Mininet API)
                     addr2: str | None = None, node1: Any = None, node2: Any = None,
                     deleteIntfs: bool = True) -> Any:  # noqa: N803
        node1 = self.node1 if node1 is None else node1
        node2 = self.node2 if node2 is None else node2
        if getattr(node1, "server", "localhost") == getattr(node2, "server", "localhost"):
            return Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=deleteIntfs)
        self.vni = VNI_BASE + next(self._vni)
        ends = []
        for node, intf, addr, far in ((node1, intfname1, addr1, node2), (node2, intfname2, addr2, node1)):
            local, remote = tunnel_addresses(node, far)
            underlay = underlay_mtu(node, remote)
            room = underlay - VXLAN_OVERHEAD
            if self.mtu is not None and self.mtu > room:
                raise ClusterError(f"link {node1.name}-{node2.name}: MTU {self.mtu} does not fit a VXLAN tunnel "
                                   f"over {node.server}'s {underlay}-byte underlay (at most {room}); raise the "
                                   "underlay's MTU or lower the fabric's")
            ends.append((node, intf, vxlan_argv(intf, self.vni, local, remote, addr, self.mtu or room)))
        made: list[tuple[Any, str, bool]] = []  # (node, interface, moved into the node's namespace)
        try:
            for node, intf, argv in ends:
                node_cmd(node, argv)
                made.append((node, intf, False))
                if node.inNamespace:
                    node_cmd(node, ["ip", "link", "set", intf, "netns", str(node.pid)])
                    made[-1] = (node, intf, True)
        except Exception:
            for node, intf, moved in made:
                node.cmd(f"ip link del {intf}") if moved else node.rcmd(["ip", "link", "del", intf])
            raise
        self.tunnel = self.vni  # RemoteLink.stop: a tunnel's ends are deleted, not a veth pair
        return None

    def stop(self) -> None:
        if self.tunnel:
            self.intf1.delete()
            self.intf2.delete()
            self.tunnel = None
        else:
            Link.stop(self)


def vxlan_argv(intf: str, vni: int, local: str, remote: str, mac: str | None, mtu: int) -> list[str]:
    argv = ["ip", "link", "add", intf, "mtu", str(mtu)]
    if mac:
        argv += ["address", mac]
    return [*argv, "type", "vxlan", "id", str(vni), "local", local, "remote", remote, "dstport", str(VXLAN_PORT)]


def node_cmd(node: Any, argv: list[str], timeout_s: float = 30.0) -> str:
    """argv (no shell: ssh joins words with spaces, so no word may hold one) in the root namespace of
    node's server (as Mininet's rpopen runs it there: over the node's ssh, with sudo); its output, or
    its error raised. Started without Mininet's preexec_fn, so without fork(): in a process with gRPC's
    threads, a forked child ran gRPC's fork handlers, which broke it (`ip route get` failed, saying only
    'epoll_wait error: Bad file descriptor', beside a full test run)."""
    cmd = [*(w for w in node.sshcmd if w != "-tt"), "sudo", "-E", *argv] if getattr(node, "isRemote", False) else argv
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{node.server}: {shlex.join(argv)}: no answer in {timeout_s:g} s") from None
    if done.returncode:
        said = (done.stderr.strip() or done.stdout.strip()) or f"exit {done.returncode}"
        raise ClusterError(f"{node.server}: {shlex.join(argv)}: {said}")
    return done.stdout


def tunnel_addresses(node: Any, far: Any) -> tuple[str, str]:
    """(this end's address, the far end's) on the experiment network: this machine ('localhost') has
    no serverIP of use; its address is the source of its route to the far server (asked here: asked on
    the far server, the route to its own address is its loopback's, and both ends were its own)."""
    remote = far.serverIP if far.server != "localhost" else route_source(far, node.serverIP)
    local = node.serverIP if node.server != "localhost" else route_source(node, remote)
    return local, remote


def route_source(node: Any, to: str) -> str:
    words = node_cmd(node, ["ip", "-o", "route", "get", to]).split()
    if "src" not in words:
        raise ClusterError(f"{node.server}: no route to {to}")
    return words[words.index("src") + 1]


def underlay_mtu(node: Any, to: str) -> int:
    words = node_cmd(node, ["ip", "-o", "route", "get", to]).split()
    if "dev" not in words:
        raise ClusterError(f"{node.server}: no route to {to}")
    dev = words[words.index("dev") + 1]
    # not sysfs: it shows the namespace it was mounted in, not always the one asking
    link = node_cmd(node, ["ip", "-o", "link", "show", "dev", dev]).split()
    if "mtu" not in link:
        raise ClusterError(f"{node.server}: no MTU for {dev}: {' '.join(link)}")
    return int(link[link.index("mtu") + 1])


class NamespaceServer:
    """A second server on this machine (see the module's doc): namespace `ns`, reached from the root
    namespace at `address` over a veth (root end `uplink`), sshd inside bound to that address only."""

    def __init__(self, run_dir: Path, spawner: Spawner, ssh: SshConfig, name: str = "srv2",
                 subnet: str = "172.31.250", mtu: int = 9100) -> None:
        self.run_dir, self.spawner, self.ssh, self.name = run_dir, spawner, ssh, name
        self.ns = f"starnet-{name}"
        self.uplink = f"{name}-up"[:15]
        self.gateway, self.address = f"{subnet}.1", f"{subnet}.2"
        self.mtu = mtu  # the underlay: the fabric's 9000 plus VXLAN's 50 fit
        self.sshd: subprocess.Popen | None = None

    @property
    def server(self) -> Server:
        return Server(self.name, self.address)

    def start(self, timeout_s: float = 10.0) -> Server:
        if shutil.which("sshd") is None and not Path(SSHD).exists():
            raise ClusterError("sshd not found: the namespace server needs openssh-server (make deps installs it)")
        if shutil.which("bindfs") is None:
            raise ClusterError("bindfs not found: the namespace server sees the run directory through it "
                               "(make deps installs it)")
        if Path(f"/run/netns/{self.ns}").exists() or Path(f"/sys/class/net/{self.uplink}").exists():
            raise ClusterError(f"{self.ns} or {self.uplink} exists already: another run's namespace server "
                               "(`make clean` ends it if that run is gone)")
        prefix = self.gateway.rsplit(".", 1)[0] + "."
        taken = [line for line in run(["ip", "-o", "-4", "addr", "show"]).splitlines() if f" {prefix}" in line]
        if taken:
            raise ClusterError(f"the namespace server's subnet {prefix}0/30 is in use on this machine "
                               f"({taken[0].split()[1]}): choose another (subnet=)")
        record_netns(self.run_dir, [self.ns])
        record_interfaces(self.run_dir, [self.uplink])
        run(["ip", "netns", "add", self.ns])
        run(["ip", "link", "add", self.uplink, "mtu", str(self.mtu), "type", "veth", "peer", "name", "eth0",
             "mtu", str(self.mtu), "netns", self.ns])
        run(["ip", "addr", "add", f"{self.gateway}/30", "dev", self.uplink])
        run(["ip", "link", "set", self.uplink, "up"])
        for argv in (["ip", "addr", "add", f"{self.address}/30", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"],
                     ["ip", "link", "set", "lo", "up"]):
            run(["ip", "netns", "exec", self.ns, *argv])
        self._start_sshd(timeout_s)
        self.ssh.add(self.server)
        return self.server

    def _start_sshd(self, timeout_s: float) -> None:
        d = self.ssh.dir / self.name
        d.mkdir(parents=True, exist_ok=True)
        host_key = d / "ssh_host_ed25519_key"
        if not host_key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)])
        authorized = d / "authorized_keys"
        authorized.write_text(self.ssh.ensure_key().read_text())
        authorized.chmod(0o600)
        config = d / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {self.address}", f"HostKey {host_key}", f"AuthorizedKeysFile {authorized}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "AllowTcpForwarding yes", "PermitListen none", "StreamLocalBindUnlink yes",
            "X11Forwarding no", "PermitTunnel no", f"PidFile {d / 'sshd.pid'}",
            # every node's shell on this server is a session of the one shared connection (OpenSSH's
            # default of 10 refused a fabric's 11th node)
            "MaxSessions 256", ""]))
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        RUN_STARNET.mkdir(parents=True, exist_ok=True)
        # A machine of its own but for the disk: its own network, its own PIDs (sshd their first: when it
        # ends, so does all that runs there), its own /run/starnet; the project at the same path, and the
        # run directory as NFS would share it — through a file system of another kind (bindfs, FUSE), where
        # a Unix socket of this machine is not reached, as across two machines.
        run_dir = shlex.quote(str(self.run_dir))
        isolated = ["unshare", "--pid", "--kill-child", "--mount", "--propagation", "private", "--mount-proc",
                    "sh", "-c", f"mount -t tmpfs -o mode=0755 starnet-{self.name} {RUN_STARNET} && "
                                f"bindfs --no-allow-other {run_dir} {run_dir} && "
                                f"exec {SSHD} -D -e -f {shlex.quote(str(config))}"]
        self.sshd = sshd = self.spawner.start(f"sshd-{self.name}", ["ip", "netns", "exec", self.ns, *isolated],
                                              log=d / "sshd.log")
        if not wait_until(lambda: self._listening() or sshd.poll() is not None, timeout_s):
            raise ClusterError(f"{self.name}: sshd not listening on {self.address}:22 after {timeout_s:g} s "
                               f"(see {d / 'sshd.log'})")
        if sshd.poll() is not None:
            raise ClusterError(f"{self.name}: sshd exited ({sshd.returncode}); see {d / 'sshd.log'}")

    def _listening(self) -> bool:
        try:
            with socket.create_connection((self.address, 22), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        self.ssh.close(self.name)
        if self.sshd is not None:
            self.spawner.stop(f"sshd-{self.name}", self.sshd, grace_s=2.0)
            self.sshd = None
        end_namespace_processes(self.ns)  # sshd's sessions, a remote node's shell: they would keep it alive
        subprocess.run(["ip", "link", "del", self.uplink], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def __enter__(self) -> NamespaceServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerSpawner:
    """The Spawner interface (emulation/spawn.py) on a server, over SSH: argv runs in the server's root
    namespace, or in a host's there (mnexec, with the host's PID on that server); its output appended
    to `log` on the server. The local Popen is the ssh session, alive as long as the process (sh execs
    it after printing its PID); the process's PID and start time on the server are recorded under
    remote-pids/<server>/, and stop() ends it there by that PID, never by a name."""

    def __init__(self, run_dir: Path, ssh: SshConfig, server: str, host_pids: dict[str, int] | None = None,
                 local: Spawner | None = None) -> None:
        self.run_dir, self.ssh, self.server = run_dir, ssh, server
        self.local = local or LocalSpawner(run_dir)  # this machine's: the forwards of shared sockets
        self.host_pids: dict[str, int] = dict(host_pids or {})
        self.records = run_dir / runfiles.REMOTE_PIDS / server
        self.records.mkdir(parents=True, exist_ok=True)
        self.remote: dict[str, tuple[int, str]] = {}  # label → (pid, start) on the server

    def add_hosts(self, pids: Any) -> None:
        self.host_pids.update(pids)

    def start(self, label: str, argv: list[str], log: Path | None = None, host: str | None = None,
              new_session: bool = False, timeout_s: float = 15.0) -> subprocess.Popen:
        if host is not None:
            if host not in self.host_pids:
                raise ClusterError(f"{self.server}: no host {host!r} to start {label} in")
            argv = ["mnexec", "-a", str(self.host_pids[host]), *argv]
        out = shlex.quote(str(log)) if log is not None else "/dev/null"
        mkdir = f"mkdir -p {shlex.quote(str(log.parent))} && " if log is not None else ""
        # In the project's directory (at the same path on every server, as Mininet's cluster has mininet);
        # new_session needs nothing: sshd gives every session's processes a session of their own. Its PID
        # and start time printed first: one round trip, and a process that ends at once is still known.
        stamp = f"echo $$ $({START_TIME.format(pid='$$')})"
        script = (f"cd {shlex.quote(str(PROJECT_ROOT))} && {mkdir}{stamp} && exec {shlex.join(argv)} >> {out} 2>&1 "
                  "< /dev/null")
        proc = subprocess.Popen(self.ssh.ssh(self.server, ["sh", "-c", script]), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        words = _read_line(proc, timeout_s).split()
        if len(words) != 2 or not all(w.isdigit() for w in words):
            proc.kill()
            _, err = proc.communicate()
            said = (" ".join(words) + " " + err.decode()).strip() or "no PID"
            raise ClusterError(f"{self.server}: {label} did not start: {said}")
        pid, start = int(words[0]), words[1]
        self.remote[label] = (pid, start)
        (self.records / f"{label}.pid").write_text(f"{pid} {start}\n")
        return proc

    def stop(self, label: str, proc: subprocess.Popen, grace_s: float = 5.0) -> int:
        pid, start = self.remote.pop(label, (0, "?"))
        if pid:  # whether or not its ssh session still runs: a session ended (terminated here, or its
            # connection lost) leaves the process running on the server, no terminal to hang up
            try:
                end_remote_process(self.run_dir, self.server, pid, start, grace_s, orphans=True)
            except OSError as exc:
                raise ClusterError(str(exc)) from None
        try:
            status = proc.wait(grace_s + 5.0)  # the session ends with the process
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
        (self.records / f"{label}.pid").unlink(missing_ok=True)
        return status

    def command_prefix(self, shared: bool = True) -> list[str]:
        return remote_prefix(self.run_dir, self.server, shared)

    def promote(self, label: str, proc: subprocess.Popen, priority: int) -> None:
        """chrt on the server, every thread of the process recorded under `label` (its start time
        checked first: a PID reused since is left alone)."""
        pid, start = self.remote.get(label, (0, "?"))
        if not pid:
            raise RealtimeError(f"{self.server}: no process {label} started here")
        script = (f"{still_running(pid, start)} || {{ echo {label} has ended; exit 3; }}; "
                  f"chrt --fifo --all-tasks --pid {int(priority)} {pid}")
        try:
            self.ssh.run(self.server, ["sh", "-c", script])
        except ClusterError as exc:
            raise RealtimeError(f"{label} (pid {pid} on {self.server}): cannot set SCHED_FIFO {priority}: {exc}") \
                from None

    def placed(self, label: str, proc: subprocess.Popen) -> tuple[Spawner, int]:
        return self, self.remote[label][0]

    @property
    def socket_dir(self) -> Path | None:
        return cluster_sockets(self.run_dir)

    def share(self, label: str, path: Path) -> Callable[[], None]:
        forward = SocketForward(self.local, self.ssh, self.server, path, path, f"share-{label}-{self.server}",
                                served_here=True)
        forward.start()
        return forward.stop


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """The first line of proc's stdout within timeout_s ('' if none: it exited or stayed silent)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return ""
    return proc.stdout.readline().decode(errors="replace")


class SocketForward:
    """A Unix socket here that reaches a Unix socket on a server, through SSH (`ssh -N -L here:there`):
    how the controller reaches a remote switch's P4Runtime, which serves on a Unix socket on its
    server only (never an address of the network: the tunnel is SSH's, authenticated by the run's key
    and encrypted). served_here: the other way (`ssh -N -R there:here`), a socket served here reached
    on the server — the controller's advice API by the host agents and ranks there, a job's control
    socket by its ranks there. Started and stopped through a Spawner of this machine (recorded for make
    clean)."""

    def __init__(self, spawner: Spawner, ssh: SshConfig, server: str, here: Path, there: Path,
                 label: str, served_here: bool = False) -> None:
        self.spawner, self.ssh, self.server = spawner, ssh, server
        self.here, self.there, self.label = here, there, label
        self.served_here = served_here
        self.proc: subprocess.Popen | None = None
        self.log = run_log_dir(ssh) / f"{label}.log"

    @property
    def address(self) -> str:
        return f"unix:{self.here}"

    def start(self, timeout_s: float = 10.0) -> None:
        if not self.served_here:
            self.here.unlink(missing_ok=True)
        way = ["-R", f"{self.there}:{self.here}"] if self.served_here else ["-L", f"{self.here}:{self.there}"]
        argv = ["ssh", "-F", str(self.ssh.path), "-N", "-S", "none", "-o", "ExitOnForwardFailure=yes",
                "-o", "StreamLocalBindUnlink=yes", *way, self.server]  # a connection of its own
        self.proc = proc = self.spawner.start(self.label, argv, log=self.log)
        if not wait_until(lambda: self._listening() or proc.poll() is not None, timeout_s, 0.05):
            raise ClusterError(f"{self.server}: forward of {self.there} not up after {timeout_s:g} s")
        if proc.poll() is not None:
            raise ClusterError(f"{self.server}: forward of {self.there} failed (exit {proc.returncode}); "
                               f"see {self.log}")

    def _listening(self) -> bool:
        if not self.served_here:
            return self.here.exists()
        try:  # bound on the server: asked there, over the shared connection
            self.ssh.run(self.server, ["test", "-S", str(self.there)], timeout_s=5.0)
            return True
        except ClusterError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.spawner.stop(self.label, self.proc, grace_s=2.0)
            self.proc = None
        if not self.served_here:
            self.here.unlink(missing_ok=True)
        else:  # sshd leaves the socket it bound
            try:
                self.ssh.run(self.server, ["rm", "-f", str(self.there)], timeout_s=10.0)
            except ClusterError:
                pass  # the server is gone, or going: Cluster.stop removes the directory


def run_log_dir(ssh: SshConfig) -> Path:
    """Where the run's SSH forwards log (cluster/forwards/)."""
    path = ssh.dir / "forwards"
    path.mkdir(parents=True, exist_ok=True)
    return path


class ClusterSwitchMixin(ClusterNodeMixin):
    """A P4 switch node on a server: its ports are prepared through its shell there (not here)."""

    def prepare_intf(self, name: str) -> None:
        if not self.isRemote:
            super().prepare_intf(name)
            return
        out = self.cmd(switch_intf_script(name))
        if not out.strip().endswith("ok"):
            raise ClusterError(f"{self.server}: port {name} of {self.name}: {out.strip()}")


class ClusterStarHost(ClusterNodeMixin, StarHost):
    pass


class ClusterSoftSwitch(ClusterSwitchMixin, SoftP4Switch):
    pass


class ClusterBmv2Switch(ClusterSwitchMixin, BMv2Switch):
    pass


CLUSTER_NODES = NodeClasses(soft_switch=ClusterSoftSwitch, bmv2_switch=ClusterBmv2Switch, host=ClusterStarHost,
                            link=VxlanLink)


class ClusterSpawner:
    """The Spawner interface over a cluster: a process in a host starts on that host's server (its
    ServerSpawner), everything else here (`local`)."""

    def __init__(self, local: Spawner, servers: dict[str, ServerSpawner], server_of: dict[str, str]) -> None:
        self.local, self.servers, self.server_of = local, servers, server_of
        self._started_by: dict[str, Spawner] = {}  # label → the spawner that started it

    def _spawner(self, host: str | None) -> Spawner:
        server = self.server_of.get(host, "") if host is not None else ""
        return self.servers.get(server, self.local)

    def add_hosts(self, pids: Any) -> None:
        for name, pid in dict(pids).items():
            self._spawner(name).add_hosts({name: pid})

    def start(self, label: str, argv: list[str], log: Path | None = None, host: str | None = None,
              new_session: bool = False) -> subprocess.Popen:
        spawner = self._spawner(host)
        proc = spawner.start(label, argv, log, host=host, new_session=new_session)
        self._started_by[label] = spawner
        return proc

    def stop(self, label: str, proc: subprocess.Popen, grace_s: float = 5.0) -> int:
        return self._started_by.pop(label, self.local).stop(label, proc, grace_s)

    def command_prefix(self, shared: bool = True) -> list[str]:
        return self.local.command_prefix(shared)

    def promote(self, label: str, proc: subprocess.Popen, priority: int) -> None:
        self._started_by.get(label, self.local).promote(label, proc, priority)

    def placed(self, label: str, proc: subprocess.Popen) -> tuple[Spawner, int]:
        return self._started_by.get(label, self.local).placed(label, proc)

    @property
    def server(self) -> str:
        return self.local.server

    @property
    def socket_dir(self) -> Path | None:
        return next((spawner.socket_dir for spawner in self.servers.values()), None)

    def share(self, label: str, path: Path) -> Callable[[], None]:
        undo: list[Callable[[], None]] = []
        try:
            for spawner in self.servers.values():
                undo.append(spawner.share(label, path))
        except BaseException:
            for done in undo:
                done()
            raise

        def unshare() -> None:
            for done in undo:
                done()
        return unshare


class Cluster:
    """A fabric over servers, for the testbed (emulation/net.py, `cluster=`): which server each node is on
    (`server_of`: a node absent, or on 'localhost', is on this machine), the SSH config and spawner
    per server, the Mininet parameters of each node, and the forwarded P4Runtime sockets of the
    switches elsewhere. `on_namespace_server` makes its second server on this machine (tests, `make run
    SERVERS=ns`); start() brings servers up, stop() takes down what start() and the fabric made."""

    def __init__(self, run_dir: Path, local: Spawner, ssh: SshConfig, server_of: dict[str, str],
                 namespace_servers: list[NamespaceServer] | None = None) -> None:
        self.run_dir, self.local, self.ssh, self.server_of = run_dir, local, ssh, server_of
        self.namespace_servers = list(namespace_servers or [])
        self.spawners: dict[str, ServerSpawner] = {}
        self.cores: dict[str, int] = {}  # each server's CPUs (its CPU use is read against them)
        self.forwards: dict[str, SocketForward] = {}
        self.sockets = cluster_sockets(run_dir)  # switches' P4Runtime sockets on their server; the API's here
        self.spawner = ClusterSpawner(local, self.spawners, server_of)

    @classmethod
    def on_namespace_server(cls, run_dir: Path, local: Spawner, topo: Topology, name: str = "srv2") -> Cluster:
        """This machine and one namespace server, the fabric's switch groups (a leaf and its hosts) spread
        over both by emulation/placement.py's CPU model."""
        if topo.servers:
            raise ClusterError(f"{topo.name}: multi-GPU servers (NVLink bridges) are not placed across machines "
                               "yet; use a single-NIC topology in cluster mode")
        ssh = SshConfig(run_dir)
        placement = place(topo, ["localhost", name], [(a.name, b.name) for a in topo.hosts for b in topo.hosts
                                                       if a.name != b.name])
        return cls(run_dir, local, ssh, dict(placement.machine_of), [NamespaceServer(run_dir, local, ssh, name)])

    @classmethod
    def on_servers(cls, run_dir: Path, local: Spawner, topo: Topology, servers: list[Server],
                   key: Path | None) -> Cluster:
        """This machine and `servers` (real machines, reached by SSH as root with `key`), the fabric's
        switch groups spread over them by emulation/placement.py's CPU model."""
        if topo.servers:
            raise ClusterError(f"{topo.name}: multi-GPU servers (NVLink bridges) are not placed across machines "
                               "yet; use a single-NIC topology in cluster mode")
        if key is None:
            raise ClusterError("--servers: give --ssh-key, the private key every server authorizes for root "
                               "(README: Cluster mode)")
        ssh = SshConfig(run_dir, key)
        for server in servers:
            ssh.add(server)
        placement = place(topo, ["localhost", *(s.name for s in servers)],
                          [(a.name, b.name) for a in topo.hosts for b in topo.hosts if a.name != b.name])
        return cls(run_dir, local, ssh, dict(placement.machine_of))

    @property
    def servers(self) -> list[str]:
        return sorted({s for s in self.server_of.values() if s != "localhost"})

    def is_local(self, node: str) -> bool:
        return self.server_of.get(node, "localhost") == "localhost"

    def start(self) -> None:
        for ns in self.namespace_servers:
            ns.start()
        for server in self.servers:
            if server not in self.ssh.servers:
                raise ClusterError(f"no address for server {server!r}")
            self.spawners[server] = ServerSpawner(self.run_dir, self.ssh, server, local=self.local)
            try:
                self.ssh.run(server, ["mkdir", "-p", str(self.sockets)])
            except ClusterError as exc:
                s = self.ssh.servers[server]
                raise ClusterError(f"{server} ({s.user}@{s.address}) cannot be reached by SSH with {self.ssh.key}: "
                                   f"{str(exc).rsplit(': ', 1)[-1]}") from None
            self._check_shared(server)
            self.cores[server] = int(self.ssh.run(server, ["nproc"]).strip())
        self.sockets.mkdir(parents=True, exist_ok=True)  # here: the sockets this machine serves to the others
        (self.run_dir / runfiles.PLACEMENT).write_text(json.dumps(self.server_of, indent=1, sort_keys=True) + "\n")

    def _check_shared(self, server: str) -> None:
        """The project and the run directory at the same paths on `server`, the run directory shared (a
        file written here is read there): the servers' processes write their logs and records into it."""
        token = f"{server} {self.run_dir.name}"
        probe = self.run_dir / runfiles.CLUSTER_DIR / f"shared-{server}"
        probe.write_text(token + "\n")
        try:
            seen = self.ssh.run(server, ["cat", str(probe)]).strip()
        except ClusterError as exc:
            seen = f"reading {probe.name} there: {str(exc).rsplit(': ', 1)[-1]}"
        finally:
            probe.unlink(missing_ok=True)
        if seen != token:
            seen = seen if seen.startswith("reading") else f"it read {seen!r}"
            raise ClusterError(f"{server} does not see the run directory {self.run_dir} ({seen}): cluster mode needs "
                               "the project, with its venv, at the same path on every server and its runs directory "
                               "shared (NFS; README: Cluster mode)")

    @property
    def api_socket(self) -> Path:
        """The controller's advice API socket: here, and forwarded to the same path on every server."""
        return self.sockets / runfiles.CONTROLLER_SOCK

    def node_params(self, node: str) -> dict[str, Any]:
        """Mininet parameters of `node` (ClusterNodeMixin's): its server, that server's address, the run's
        ssh_config."""
        if self.is_local(node):
            return {"server": "localhost"}
        server = self.ssh.servers[self.server_of[node]]
        return {"server": server.name, "serverIP": server.address, "user": server.user, "ssh_config": self.ssh.path}

    def switch_params(self, switch: str) -> tuple[Spawner, dict[str, Any]]:
        """(the spawner of `switch`'s process, its process arguments): on another server, P4Runtime on a
        Unix socket there, reached here through an SSH-forwarded socket."""
        if self.is_local(switch):
            return self.spawner, {}
        here, there = self._sockets(switch)
        return self.spawners[self.server_of[switch]], {"serve_on": f"unix:{there}", "dial": f"unix:{here}"}

    def _sockets(self, switch: str) -> tuple[Path, Path]:
        """(the forwarded P4Runtime socket here, the switch's own on its server)."""
        return self.run_dir / f"p4rt-{switch}.sock", self.sockets / f"{switch}.sock"

    def start_forwards(self, switches: list[str]) -> None:
        """The forwarded P4Runtime socket of every switch elsewhere (ssh -L: a connection made before
        the switch serves fails alone, and its readiness check tries again)."""
        for switch in switches:
            if self.is_local(switch) or switch in self.forwards:
                continue
            server = self.server_of[switch]
            forward = SocketForward(self.local, self.ssh, server, *self._sockets(switch), f"forward-{switch}")
            forward.start()
            self.forwards[switch] = forward

    def stop(self) -> None:
        for forward in self.forwards.values():
            forward.stop()
        self.forwards.clear()
        for server in self.servers:
            if server in self.spawners:
                try:
                    self.ssh.run(server, ["rm", "-rf", str(self.sockets)], timeout_s=10.0)
                except ClusterError:
                    pass
        for ns in self.namespace_servers:
            ns.stop()
        for server in self.servers:
            self.ssh.close(server)
        shutil.rmtree(self.sockets, ignore_errors=True)
