"""Switch processes, with or without Mininet: the soft switch and BMv2's simple_switch_grpc.

Both take the same per-run parameters — device id, P4Runtime port on 127.0.0.1, run directory,
ports as (number, interface) and per-port egress (rate Mbit/s, depth packets) — and differ only in
the process they start and in how queue rate and depth are set: the soft switch's command line,
or BMv2's Thrift CLI once it answers. Readiness is checked, never slept for: the process must be
alive and answer P4Runtime Capabilities; otherwise the error carries the tail of its log. Once
ready, every thread of the process can be put under SCHED_FIFO (wire/realtime.py; the testbed does
it, and watches for runaways); the process takes its priority with it when it ends.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from emulation.ports import address_answers
from emulation.rundir import PROJECT_ROOT
from emulation.spawn import LocalSpawner, Spawner
from wire import faultsfile, runfiles
from wire.cpu import CPU_PORT
from wire.fidelity import BMV2_RATE_PKT_BYTES
from wire.proto import p4r, p4r_grpc
from wire.realtime import RealtimeError

READY_TIMEOUT_S = 30.0
BMV2_TOOLS = ("simple_switch_grpc", "p4c-bm2-ss")
BUILD_DIR = PROJECT_ROOT / "build"
BMV2_JSON = BUILD_DIR / "starnet.json"
BMV2_P4INFO = BUILD_DIR / "starnet.p4info.txtpb"
P4_SOURCES = PROJECT_ROOT / "p4src"


class SwitchStartError(RuntimeError):
    pass


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def bmv2_missing() -> list[str]:
    """The BMv2 tools that are not on PATH."""
    return [tool for tool in BMV2_TOOLS if shutil.which(tool) is None]


def compile_p4() -> tuple[Path, Path]:
    """BMv2 JSON and P4Info of p4src/starnet.p4, compiled with p4c-bm2-ss when older than the sources."""
    sources = list(P4_SOURCES.rglob("*.p4"))
    newest = max(p.stat().st_mtime for p in sources)
    if BMV2_JSON.exists() and BMV2_P4INFO.exists() and BMV2_JSON.stat().st_mtime >= newest:
        return BMV2_JSON, BMV2_P4INFO
    if shutil.which("p4c-bm2-ss") is None:
        raise SwitchStartError("p4c-bm2-ss not found: cannot compile p4src/starnet.p4 for BMv2")
    BUILD_DIR.mkdir(exist_ok=True)
    result = subprocess.run(
        ["p4c-bm2-ss", "--std", "p4-16", "--arch", "v1model", "-o", str(BMV2_JSON),
         "--p4runtime-files", str(BMV2_P4INFO), str(P4_SOURCES / "starnet.p4")],
        capture_output=True, text=True)
    if result.returncode != 0:
        raise SwitchStartError(f"p4c-bm2-ss failed:\n{result.stderr[-3000:]}")
    return BMV2_JSON, BMV2_P4INFO


class SwitchProcess:
    """One switch process serving P4Runtime on serve_on:grpc_port (127.0.0.1 unless it runs on another
    server of a cluster), reached by the controller at grpc_address.

    ports: [(P4 port, interface)]; shapes: {port: (rate_mbps, depth_pkts)} for the egress queues
    (rate 0 = line rate); label: name in the run directory's pid records and logs.
    """

    kind = "p4"

    def __init__(self, name: str, device_id: int, grpc_port: int, run_dir: Path,
                 ports: list[tuple[int, str]], shapes: dict[int, tuple[float, int]], seed: int | None = None,
                 fidelity_tolerance_ms: float | None = None, fidelity: bool = True,
                 realtime_priority: int = 0, spawner: Spawner | None = None, serve_on: str = "127.0.0.1",
                 dial: str | None = None) -> None:
        """seed: the switch's RNG seed (default: derived from the device id, so runs repeat);
        fidelity_tolerance_ms: the soft switch's late-event threshold (default wire/fidelity.py's);
        fidelity: False runs the soft switch without its monitor (bench: the monitor's cost);
        realtime_priority: SCHED_FIFO priority of its threads once ready (0: normal scheduling);
        spawner: starts and stops the process (default: on this machine);
        serve_on: the address it serves P4Runtime on — 127.0.0.1, or on another server a Unix socket
        'unix:PATH' there that the controller reaches through SSH (emulation/cluster.SocketForward);
        never a wildcard: nobody else may program the fabric;
        dial: where this machine reaches it, if not at serve_on:grpc_port (a forwarded Unix socket
        'unix:PATH')."""
        if serve_on in ("0.0.0.0", "::", ""):
            raise ValueError(f"switch {name}: P4Runtime served on {serve_on!r}, a wildcard; give one address")
        self.fidelity = fidelity
        self.realtime_priority = realtime_priority
        self.scheduling = "other"  # what it got: "fifo 20", or why not (describe(), switches.json)
        self.name = name
        self.seed = device_id if seed is None else seed
        self.fidelity_tolerance_ms = fidelity_tolerance_ms
        self.device_id = device_id
        self.grpc_port = grpc_port
        self.run_dir = Path(run_dir)
        self.spawner = spawner or LocalSpawner(self.run_dir)
        self.serve_on, self.dial = serve_on, dial
        self.ports = sorted(ports)
        self.shapes = shapes
        self.proc: subprocess.Popen | None = None
        (self.run_dir / runfiles.SWITCH_DIR).mkdir(parents=True, exist_ok=True)
        self.log_path = self.run_dir / runfiles.switch_log(name)

    @property
    def serve_address(self) -> str:
        """The gRPC target the process serves on: serve_on:grpc_port, or serve_on itself if a Unix socket."""
        return self.serve_on if self.serve_on.startswith("unix:") else f"{self.serve_on}:{self.grpc_port}"

    @property
    def grpc_address(self) -> str:
        """Where the controller and tools here reach its P4Runtime server."""
        return self.dial or self.serve_address

    @property
    def remote(self) -> list[str]:
        """The command prefix that runs a shell command line in its server's root namespace, on a
        connection of its own (the controller's port-status stream; []: this machine)."""
        return self.spawner.command_prefix(shared=False)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        raise NotImplementedError

    def launch(self) -> None:
        self.proc = self.spawner.start(f"switch-{self.name}", self.command(), self.log_path, new_session=True)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Process alive and P4Runtime answering Capabilities, else SwitchStartError with its log."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SwitchStartError(f"switch {self.name} did not start (exit {self.proc.returncode}):\n"
                                       f"{log_tail(self.log_path)}")
            if address_answers(self.grpc_address) and self._capabilities():
                self.after_ready()
                self._promote()
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

    def _promote(self) -> None:
        """Real-time scheduling for the process; where it cannot be had (not root, a real-time
        cgroup without a budget) the switch runs on at normal priority and switches.json says why."""
        assert self.proc is not None
        if not self.realtime_priority:
            return
        try:  # on its machine (a remote switch's PID here is its ssh session's: its spawner knows its own)
            self.spawner.promote(f"switch-{self.name}", self.proc, self.realtime_priority)
            self.scheduling = f"fifo {self.realtime_priority}"
        except RealtimeError as exc:
            self.scheduling = f"other ({exc})"

    def stop(self) -> None:
        if self.proc is not None:
            self.spawner.stop(f"switch-{self.name}", self.proc)

    def set_faults(self, delay_ms: float, rates: dict[int, float]) -> None:
        """Injected faults: every forwarded frame held delay_ms (a slow switch), ports drained at
        rates[port] Mbit/s (below their capacity); what is absent goes back to normal."""
        raise NotImplementedError

    def describe(self) -> dict:
        """What the controller needs to program this switch (written to switches.json)."""
        info = {"grpc": self.grpc_address, "device_id": self.device_id, "kind": self.kind,
                "ports": {str(port): intf for port, intf in self.ports}, "scheduling": self.scheduling}
        if self.remote:
            info["remote"] = self.remote
        return info


class SoftSwitchProcess(SwitchProcess):
    kind = "soft"

    @property
    def stats_path(self) -> Path:
        return self.run_dir / runfiles.switch_stats(self.name)

    @property
    def faults_path(self) -> Path:
        return faultsfile.path_of(self.run_dir, self.name, "switches")

    def set_faults(self, delay_ms: float, rates: dict[int, float]) -> None:
        """Written for the switch to pick up (it looks every 50 ms), atomically."""
        faultsfile.write(self.faults_path, {"delay_ms": delay_ms, "rates": {str(p): r for p, r in rates.items()}})

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "softswitch", "--device-id", str(self.device_id), "--name", self.name,
               "--grpc-server-addr", self.serve_address, "--cpu-port", str(CPU_PORT),
               "--stats-file", str(self.stats_path), "--seed", str(self.seed), "--faults-file", str(self.faults_path)]
        cmd += (["--fidelity-file", str(self.run_dir / runfiles.server_fidelity(self.spawner.server))] if self.fidelity
                else ["--no-fidelity"])
        if self.fidelity_tolerance_ms is not None:
            cmd += ["--fidelity-tolerance-ms", str(self.fidelity_tolerance_ms)]
        for port, intf in self.ports:
            cmd += ["-i", f"{port}@{intf}"]
            rate, depth = self.shapes.get(port, (0.0, 64))
            cmd += ["--egress-rate", f"{port}={rate}", "--egress-depth", f"{port}={depth}"]
        return cmd


class Bmv2SwitchProcess(SwitchProcess):
    """simple_switch_grpc; queue rate (packets/s) and depth (packets) set over Thrift once ready.

    thrift_port: per-run Thrift port; log_level: None keeps BMv2 logging off (it costs a lot of
    speed), else e.g. "info"/"debug"; pcap_dir: write per-port pcaps there (opt-in);
    mean_pkt_bytes: the packet size used to turn a link rate into BMv2's packets/s.
    """

    kind = "bmv2"

    def __init__(self, *args: Any, thrift_port: int, log_level: str | None = None, pcap_dir: Path | None = None,
                 mean_pkt_bytes: int = BMV2_RATE_PKT_BYTES, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.thrift_port = thrift_port
        self.log_level = log_level
        self.pcap_dir = pcap_dir
        self.mean_pkt_bytes = mean_pkt_bytes

    def command(self) -> list[str]:
        missing = bmv2_missing()
        if missing:
            raise SwitchStartError(f"switch {self.name}: {', '.join(missing)} not found on PATH")
        cmd = ["simple_switch_grpc", "--device-id", str(self.device_id), "--thrift-port", str(self.thrift_port),
               "--no-p4"]
        for port, intf in self.ports:
            cmd += ["-i", f"{port}@{intf}"]
        if self.log_level:
            cmd += ["--log-file", str(self.run_dir / runfiles.SWITCH_DIR / f"{self.name}.bmv2"), "--log-level",
                    self.log_level, "--log-flush"]
        if self.pcap_dir:
            cmd += ["--pcap", str(self.pcap_dir)]
        cmd += ["--", "--grpc-server-addr", self.serve_address, "--cpu-port", str(CPU_PORT)]
        return cmd

    def queue_commands(self, rates: dict[int, float] | None = None) -> list[str]:
        """Thrift CLI lines: BMv2 queues count packets and drain in packets/s, so the link rate is
        converted at mean_pkt_bytes. rates: {port: Mbit/s} instead of the links' (injected faults)."""
        lines = []
        for port, _ in self.ports:
            rate, depth = self.shapes.get(port, (0.0, 64))
            rate = (rates or {}).get(port, rate)
            if rate:
                lines.append(f"set_queue_rate {max(1, int(rate * 1e6 / 8 / self.mean_pkt_bytes))} {port}")
            lines.append(f"set_queue_depth {depth} {port}")
        return lines

    def set_faults(self, delay_ms: float, rates: dict[int, float]) -> None:
        """Port rates through Thrift (set_queue_rate); BMv2 has no knob for a processing delay."""
        if delay_ms:
            raise NotImplementedError("BMv2 has no processing-delay knob (the soft switch has one)")
        self._thrift(self.queue_commands(rates))

    def after_ready(self) -> None:
        self._thrift(self.queue_commands())

    def _thrift(self, lines: list[str]) -> None:
        cli = shutil.which("simple_switch_CLI")
        if cli is None:
            raise SwitchStartError(f"switch {self.name}: simple_switch_CLI not found to set queue rates")
        result = subprocess.run([cli, "--thrift-port", str(self.thrift_port)],
                                input="\n".join(lines) + "\n",
                                capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise SwitchStartError(f"switch {self.name}: Thrift queue set-up failed: {result.stderr[-500:]}")

    def describe(self) -> dict:
        json_path, p4info_path = compile_p4()
        return {**super().describe(), "thrift_port": self.thrift_port, "device_config": str(json_path),
                "p4info": str(p4info_path)}
