"""Mininet node classes: the soft P4 switch, the BMv2 switch, and host set-up.

Both switch classes take the same per-run parameters (device id, gRPC port, run directory,
per-port egress rate/depth) and differ only in the process they start and in how queue rate
and depth are set (command line for the soft switch, Thrift at start-up for BMv2).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
from mininet.node import Host, Switch

from testbed.ports import port_answers
from testbed.rundir import forget_pid, record_pid
from wire.proto import p4r, p4r_grpc

SWITCH_MTU = 9000
CPU_PORT = 255
READY_TIMEOUT_S = 30.0


class SwitchStartError(RuntimeError):
    pass


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def quiet(cmd: list[str]) -> None:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def prepare_switch_intf(name: str) -> None:
    """Offloads off (a frame read by AF_PACKET must be complete), IPv6 off, MTU 9000 (DESIGN.md)."""
    quiet(["ethtool", "-K", name, "tx", "off", "tso", "off", "gso", "off", "gro", "off"])
    quiet(["ip", "link", "set", name, "mtu", str(SWITCH_MTU)])
    try:
        Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1")
    except OSError:
        pass


class P4Switch(Switch):
    """A switch process serving P4Runtime on 127.0.0.1:grpc_port.

    device_id: P4Runtime device id; grpc_port: per-run TCP port; run_dir: run directory;
    shapes: {port: (rate_mbps, depth_pkts)} for the egress queues.
    """

    kind = "p4"

    def __init__(self, name: str, device_id: int, grpc_port: int, run_dir: Path,
                 shapes: dict[int, tuple[float, int]], **params) -> None:
        super().__init__(name, dpid=f"{device_id:016x}", **params)
        self.device_id = device_id
        self.grpc_port = grpc_port
        self.run_dir = Path(run_dir)
        self.shapes = shapes
        self.proc: subprocess.Popen | None = None
        self.log_path = self.run_dir / "switches" / f"{name}.log"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def port_intfs(self) -> list[tuple[int, str]]:
        return sorted((port, intf.name) for port, intf in self.intfs.items() if intf.name != "lo")

    def command(self) -> list[str]:
        raise NotImplementedError

    def launch(self) -> None:
        for _, intf in self.port_intfs():
            prepare_switch_intf(intf)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        record_pid(self.run_dir, f"switch-{self.name}", self.proc.pid)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Process alive and P4Runtime answering Capabilities, else SwitchStartError with its log."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SwitchStartError(f"switch {self.name} did not start (exit {self.proc.returncode}):\n"
                                       f"{log_tail(self.log_path)}")
            if port_answers(self.grpc_port) and self._capabilities():
                self.after_ready()
                return
            time.sleep(0.1)
        raise SwitchStartError(f"switch {self.name} did not answer P4Runtime on {self.grpc_address} "
                               f"within {timeout_s:.0f} s:\n{log_tail(self.log_path)}")

    def _capabilities(self) -> bool:
        with grpc.insecure_channel(self.grpc_address) as channel:
            try:
                p4r_grpc.P4RuntimeStub(channel).Capabilities(p4r.CapabilitiesRequest(), timeout=1.0)
                return True
            except grpc.RpcError:
                return False

    def after_ready(self) -> None:
        pass

    def start(self, controllers) -> None:  # Mininet API
        self.launch()
        self.wait_ready()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet API)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            forget_pid(self.run_dir, f"switch-{self.name}")
        super().stop(deleteIntfs)


class SoftP4Switch(P4Switch):
    kind = "soft"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "softswitch", "--device-id", str(self.device_id),
               "--grpc-server-addr", self.grpc_address, "--cpu-port", str(CPU_PORT),
               "--stats-file", str(self.run_dir / "switches" / f"{self.name}.stats.json")]
        for port, intf in self.port_intfs():
            cmd += ["-i", f"{port}@{intf}"]
            rate, depth = self.shapes.get(port, (0.0, 64))
            cmd += ["--egress-rate", f"{port}={rate}", "--egress-depth", f"{port}={depth}"]
        return cmd


class BMv2Switch(P4Switch):
    """simple_switch_grpc; queue rate (packets/s) and depth (packets) set over Thrift once ready.

    log_level: None keeps BMv2 logging off; pcap_dir: write per-port pcaps there (opt-in).
    """

    kind = "bmv2"

    def __init__(self, name: str, thrift_port: int, log_level: str | None = None,
                 pcap_dir: Path | None = None, mean_pkt_bytes: int = 1500, **params) -> None:
        super().__init__(name, **params)
        self.thrift_port = thrift_port
        self.log_level = log_level
        self.pcap_dir = pcap_dir
        self.mean_pkt_bytes = mean_pkt_bytes

    def command(self) -> list[str]:
        cmd = ["simple_switch_grpc", "--device-id", str(self.device_id), "--thrift-port", str(self.thrift_port),
               "--no-p4"]
        for port, intf in self.port_intfs():
            cmd += ["-i", f"{port}@{intf}"]
        if self.log_level:
            cmd += ["--log-file", str(self.run_dir / "switches" / f"{self.name}.bmv2"), "--log-level",
                    self.log_level, "--log-flush"]
        if self.pcap_dir:
            cmd += ["--pcap", str(self.pcap_dir)]
        cmd += ["--", "--grpc-server-addr", self.grpc_address, "--cpu-port", str(CPU_PORT)]
        return cmd

    def after_ready(self) -> None:
        # BMv2 queues count packets and drain in packets/s: convert the link rate at the mean size.
        lines = []
        for port, _ in self.port_intfs():
            rate, depth = self.shapes.get(port, (0.0, 64))
            if rate:
                lines.append(f"set_queue_rate {max(1, int(rate * 1e6 / 8 / self.mean_pkt_bytes))} {port}")
            lines.append(f"set_queue_depth {depth} {port}")
        cli = shutil.which("simple_switch_CLI")
        if cli is None:
            raise SwitchStartError(f"switch {self.name}: simple_switch_CLI not found to set queue rates")
        result = subprocess.run([cli, "--thrift-port", str(self.thrift_port)], input="\n".join(lines) + "\n",
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise SwitchStartError(f"switch {self.name}: Thrift queue set-up failed: {result.stderr[-500:]}")


def bmv2_available() -> bool:
    return all(shutil.which(tool) for tool in ("simple_switch_grpc", "p4c-bm2-ss"))


class StarHost(Host):
    """A host with offloads and IPv6 off, a /32 address and an on-link default route via the leaf."""

    def setup_fabric(self, ip: str, gateway_ip: str, gateway_mac: str) -> None:
        intf = self.defaultIntf().name
        self.cmd(f"ethtool -K {intf} tx off tso off gso off gro off >/dev/null 2>&1")
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
        self.cmd(f"ip route replace default via {gateway_ip} dev {intf} onlink")
        self.cmd(f"ip neigh replace {gateway_ip} lladdr {gateway_mac} dev {intf} nud permanent")
