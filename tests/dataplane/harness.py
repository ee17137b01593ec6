"""One P4 switch between veth pairs whose host ends live in network namespaces, for data-plane tests.

    with SwitchHarness("soft", ports=4, shapes={4: (2.0, 64)}) as h:
        h.session.call(h.session.s.write([...]))
        h.send(1, frame); h.receive(2, match=lambda f: ..., count=1)

The switch is a real process (the soft switch, or simple_switch_grpc with p4c's output),
programmed over P4Runtime by the controller's own SwitchSession, run on a background event loop.
Everything created is recorded in a run directory and removed on exit.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyroute2 import netns

from controller.p4rt_client import SwitchSession
from emulation.ports import free_ports
from emulation.rundir import clean_run, new_run_dir, record_interfaces, record_netns
from emulation.switchproc import Bmv2SwitchProcess, SoftSwitchProcess, SwitchProcess, compile_p4
from wire.p4info import P4Schema

ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33  # asm-generic/socket.h: root may exceed rmem_max


def sh(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {result.stderr.strip()}")


class SyncSession:
    """The controller's asyncio SwitchSession, driven from synchronous test code."""

    def __init__(self, address: str, device_id: int, schema: P4Schema) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="p4rt-loop", daemon=True)
        self.thread.start()
        self.s: SwitchSession = self.call(self._make(address, device_id, schema))
        self.call(self.s.connect())

    @staticmethod
    async def _make(address: str, device_id: int, schema: P4Schema) -> SwitchSession:
        return SwitchSession("dut", address, device_id, schema)

    def call(self, coro, timeout_s: float = 20.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def packet_in(self, timeout_s: float = 3.0):
        """The next PacketIn, or None after timeout_s."""
        async def get():
            try:
                return await asyncio.wait_for(self.s.packet_ins.get(), timeout_s)
            except TimeoutError:
                return None
        return self.call(get(), timeout_s + 5)

    def close(self) -> None:
        try:
            self.call(self.s.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


def _nothing_to_read(exc: OSError) -> None:
    """A host socket's recv ended: empty (EAGAIN), or its link went down (ENETDOWN, reported once
    by the kernel when the host end of a link is taken down); anything else is an error."""
    if exc.errno not in (errno.EAGAIN, errno.ENETDOWN):
        raise exc


RECEIVE_TIMEOUT_S = 10.0  # a ceiling: receives return as soon as the frames they wait for are in


class SwitchHarness:
    """target: "soft" or "bmv2"; ports: number of switch ports (1..N); shapes: {port: (Mbit/s, pkts)}."""

    def __init__(self, target: str, ports: int = 4, shapes: dict[int, tuple[float, int]] | None = None) -> None:
        self.target = target
        self.n_ports = ports
        self.shapes = shapes or {}
        self.run_dir = new_run_dir(f"dataplane-{target}")
        tag = f"{os.getpid() % 10000}{len(target)}"
        self.namespaces = {p: f"dp{tag}h{p}" for p in range(1, ports + 1)}
        self.switch_intfs = {p: f"dp{tag}s{p}" for p in range(1, ports + 1)}
        self.host_macs = {p: f"02:00:00:00:0d:{p:02x}" for p in range(1, ports + 1)}
        self.sockets: dict[int, socket.socket] = {}
        self.switch: SwitchProcess | None = None
        self.session: SyncSession | None = None
        self.schema = P4Schema.load()
        self.device_config = b""

    # ---- bring-up / tear-down ----------------------------------------------------------------
    def __enter__(self) -> SwitchHarness:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        record_netns(self.run_dir, list(self.namespaces.values()))
        record_interfaces(self.run_dir, list(self.switch_intfs.values()))
        for port, ns in self.namespaces.items():
            intf = self.switch_intfs[port]
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", intf, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "address", self.host_macs[port], "up")
            sh("ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off", "rx", "off")
            sh("sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1")
            sh("ethtool", "-K", intf, "tx", "off", "rx", "off", "gso", "off", "tso", "off", "gro", "off")
            sh("ip", "link", "set", intf, "mtu", "9000", "up")
            self.sockets[port] = self._host_socket(ns)
        grpc_port, thrift_port = free_ports(2)
        ports = sorted(self.switch_intfs.items())
        if self.target == "soft":
            self.switch = SoftSwitchProcess("dut", 1, grpc_port, self.run_dir, ports, self.shapes)
        else:
            self.switch = Bmv2SwitchProcess("dut", 1, grpc_port, self.run_dir, ports, self.shapes,
                                            thrift_port=thrift_port)
            json_path, p4info_path = compile_p4()
            self.schema = P4Schema.load(p4info_path)
            self.device_config = Path(json_path).read_bytes()
        self.switch.launch()
        self.switch.wait_ready()
        self.session = SyncSession(self.switch.grpc_address, 1, self.schema)
        self.session.call(self.session.s.set_pipeline(self.device_config))

    @staticmethod
    def _host_socket(ns: str) -> socket.socket:
        netns.pushns(ns)
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
            sock.bind(("eth0", 0))
        finally:
            netns.popns()
        sock.setblocking(False)
        return sock

    def close(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            except Exception:  # the switch may already be gone; cleanup goes on
                pass
            self.session = None
        if self.switch is not None:
            self.switch.stop()
        for sock in self.sockets.values():
            sock.close()
        self.sockets = {}
        clean_run(self.run_dir)

    # ---- traffic -----------------------------------------------------------------------------
    def write(self, updates) -> None:
        assert self.session is not None
        self.session.call(self.session.s.write(updates))

    def send(self, port: int, frame: bytes, count: int = 1) -> None:
        sock = self.sockets[port]
        for _ in range(count):
            while True:
                try:
                    sock.send(frame)
                    break
                except BlockingIOError:
                    time.sleep(0.001)

    def drain(self) -> None:
        for sock in self.sockets.values():
            try:
                while sock.recv(10000):
                    pass
            except OSError as exc:
                _nothing_to_read(exc)

    def receive(self, port: int, match: Callable[[bytes], bool], count: int = 1,
                timeout_s: float = RECEIVE_TIMEOUT_S, settle_s: float = 0.0) -> list[bytes]:
        """Frames arriving at host `port` that satisfy `match`: stop at `count`, or at timeout_s.

        settle_s: after reaching `count`, keep listening this long (to catch extra frames)."""
        return self.receive_many([port], match, count, timeout_s, settle_s)[port]

    def receive_many(self, ports: list[int], match: Callable[[bytes], bool], count: int = 1,
                     timeout_s: float = RECEIVE_TIMEOUT_S, settle_s: float = 0.0) -> dict[int, list[bytes]]:
        """receive() over several host ports at once: stop when `count` frames arrived in all."""
        socks = {self.sockets[p]: p for p in ports}
        got: dict[int, list[bytes]] = {p: [] for p in ports}
        deadline = time.monotonic() + timeout_s
        settling = False
        while (remaining := deadline - time.monotonic()) > 0:
            for sock in select.select(list(socks), [], [], remaining)[0]:
                try:
                    while True:
                        frame = sock.recv(10000)
                        if match(frame):
                            got[socks[sock]].append(frame)
                except OSError as exc:
                    _nothing_to_read(exc)
            if sum(map(len, got.values())) >= count and not settling:
                if not settle_s:
                    break
                settling = True
                deadline = time.monotonic() + settle_s
        return got

    def set_link(self, port: int, up: bool) -> None:
        """Take the link of `port` down or up at its host end: the switch-side interface stays
        administratively up and reads operstate "down" (no carrier), which is how the soft switch
        and BMv2's port monitor (every 200 ms, /sys/class/net/<if>/operstate) learn of it. Taking
        the switch's own end down instead stops BMv2's receive path (p4lang/behavioral-model#1215)."""
        sh("ip", "netns", "exec", self.namespaces[port], "ip", "link", "set", "eth0", "up" if up else "down")
