"""Forwarding rate of one soft switch process next to a Linux bridge, in the same namespaces.

    sudo .venv/bin/python bench/softswitch_pps.py [--seconds 4] [--sizes 60,1514]

Two named network namespaces (sender, receiver) each hold one end of a veth pair; the other ends
are the switch's ports 1 and 2 in the root namespace. The soft switch runs its full pipeline
(port_role, fault_inject, ipv4_lpm through ecmp_selector, TTL/MAC rewrite and checksum, tx
counters, egress queue without a rate limit), programmed over P4Runtime. A Python AF_PACKET
sender in the sender namespace offers as many frames as it can over 64 flows; the rate is the
receiver interface's rx counter over the middle of the run (frames are addressed to a MAC the
receiver does not own, so it drops them right after counting). Then the same two veths are put in a
Linux bridge and measured the same way. Everything created is recorded in a run directory and
removed at the end (also by `make clean` if this is killed).

Then INT is switched on for every packet (source on port 1, sink with reports on port 2) and the
soft switch is measured again: the cost of INT.

The fidelity monitor's cost: the soft switch is measured with its monitor (the default, kernel
receive timestamps and lateness per window) and again started with --no-fidelity.

With BMv2 and p4c on PATH (or --bmv2 yes), simple_switch_grpc is measured on the same veths in
the same run, programmed with the same entries from p4c's output of starnet.p4.

TCP across one switch: one iperf3 flow (cubic, no segmentation offload, so 1500 B packets on the
wire) from the sender's namespace to a second address of the receiver, routed both ways by the
switch under test (data and ACKs), for each of soft switch, BMv2 and the bridge.

Sizes are Ethernet frames without FCS: 60 is the 64 B minimum frame, 1514 a 1500 B IP packet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller import entities as ent  # noqa: E402
from controller.p4rt_client import SwitchSession  # noqa: E402
from emulation.ports import free_ports  # noqa: E402
from emulation.rundir import (  # noqa: E402
    clean_run,
    forget_pid,
    new_run_dir,
    record_interfaces,
    record_netns,
    record_pid,
)
from emulation.switchproc import Bmv2SwitchProcess, SoftSwitchProcess, bmv2_missing, compile_p4  # noqa: E402
from emulation.traffic import iperf3_rates  # noqa: E402
from wire.cpu import CPU_PORT, REPORT_SESSION  # noqa: E402
from wire.p4info import P4Schema  # noqa: E402

SENDER_IP, RECEIVER_IP = "10.99.0.1", "10.99.0.2"
TCP_IP = "10.99.0.3"  # the receiver's second address: TCP goes there, to its own MAC, and back
SENDER_MAC, RECEIVER_MAC = "02:00:00:99:00:01", "02:00:00:99:00:02"
SWITCH_MAC = "02:53:00:99:00:01"
# Frames leave for a MAC nobody owns: the receiver counts them and drops them at once (not for
# this host), so its own stack costs no CPU that the forwarder under test would need.
SINK_MAC = "02:00:00:99:00:fe"
WARMUP_S = 1.0
# Sender and forwarder each get a core of their own, so runs compare the forwarder, not the scheduler.
SENDER_CPU, SWITCH_CPU = 0, (1 if (os.cpu_count() or 1) > 1 else 0)
console = Console(width=150)


def sh(*args: str, ns: str | None = None) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {result.stderr.strip()}")
    return result.stdout


class PinnedSoftSwitch(SoftSwitchProcess):
    """The testbed's soft switch process, on a core of its own."""

    def command(self) -> list[str]:
        return ["taskset", "-c", str(SWITCH_CPU), *super().command()]


class PinnedBmv2(Bmv2SwitchProcess):
    """simple_switch_grpc as the testbed starts it (logging off), on the switch's core."""

    def command(self) -> list[str]:
        return ["taskset", "-c", str(SWITCH_CPU), *super().command()]


class Bench:
    def __init__(self, run_dir: Path, seconds: float) -> None:
        tag = os.getpid() % 100000
        self.run_dir = run_dir
        self.seconds = seconds
        self.ns_send, self.ns_recv = f"snb{tag}snd", f"snb{tag}rcv"
        self.port1, self.port2, self.bridge = f"snb{tag}p1", f"snb{tag}p2", f"snb{tag}br"

    # ---- namespaces and links ---------------------------------------------------------------
    def build(self) -> None:
        record_netns(self.run_dir, [self.ns_send, self.ns_recv])
        record_interfaces(self.run_dir, [self.port1, self.port2, self.bridge])
        for ns, port, mac, ip in ((self.ns_send, self.port1, SENDER_MAC, SENDER_IP),
                                  (self.ns_recv, self.port2, RECEIVER_MAC, RECEIVER_IP)):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", "eth0", "address", mac, "up", ns=ns)
            sh("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
            if ns == self.ns_recv:
                sh("ip", "addr", "add", f"{TCP_IP}/24", "dev", "eth0", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            sh("ethtool", "-K", "eth0", "tx", "off", "rx", "off", "gso", "off", "tso", "off", ns=ns)
            sh("ethtool", "-K", port, "tx", "off", "rx", "off", "gso", "off", "tso", "off", "gro", "off")
            sh("sysctl", "-qw", f"net.ipv6.conf.{port}.disable_ipv6=1")
            sh("ip", "link", "set", port, "up")

    def destroy(self) -> None:
        for line in clean_run(self.run_dir):
            console.log(line)

    # ---- measurement ------------------------------------------------------------------------
    def rx_packets(self) -> int:
        return int(sh("cat", "/sys/class/net/eth0/statistics/rx_packets", ns=self.ns_recv))

    def measure(self, size: int, dst_mac: str) -> dict:
        sender = subprocess.Popen(
            ["taskset", "-c", str(SENDER_CPU), "ip", "netns", "exec", self.ns_send, sys.executable,
             str(ROOT / "bench" / "udp_blast.py"), "eth0",
             "--src-mac", SENDER_MAC, "--dst-mac", dst_mac, "--src-ip", SENDER_IP, "--dst-ip", RECEIVER_IP,
             "--size", str(size), "--seconds", str(self.seconds + 2 * WARMUP_S)],
            stdout=subprocess.PIPE, text=True)
        record_pid(self.run_dir, "sender", sender.pid)
        try:
            time.sleep(WARMUP_S)
            rx0, t0 = self.rx_packets(), time.monotonic()
            time.sleep(self.seconds)
            rx1, t1 = self.rx_packets(), time.monotonic()
            out, _ = sender.communicate(timeout=self.seconds + 30)
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait()
            forget_pid(self.run_dir, "sender")
        sent = json.loads(out.strip().splitlines()[-1])
        return {"kpps": (rx1 - rx0) / (t1 - t0) / 1e3, "offered_kpps": sent["sent"] / sent["seconds"] / 1e3}

    def measure_tcp(self, via_mac: tuple[str, str] | None) -> dict:
        """One iperf3 TCP flow sender → TCP_IP for self.seconds; via_mac: the next-hop MACs (sender's,
        receiver's) the hosts use for each other — the switch's for a router, None for the bridge."""
        to_receiver, to_sender = via_mac or (RECEIVER_MAC, SENDER_MAC)
        sh("ip", "neigh", "replace", TCP_IP, "lladdr", to_receiver, "dev", "eth0", ns=self.ns_send)
        sh("ip", "neigh", "replace", SENDER_IP, "lladdr", to_sender, "dev", "eth0", ns=self.ns_recv)
        server = subprocess.Popen(["taskset", "-c", str(SENDER_CPU), "ip", "netns", "exec", self.ns_recv,
                                   "iperf3", "-s", "-1", "-B", TCP_IP, "-p", "5201"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        record_pid(self.run_dir, "iperf3-server", server.pid)
        try:
            deadline = time.monotonic() + 5
            while ":5201" not in sh("ss", "-ltnH", "sport = :5201", ns=self.ns_recv):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("iperf3 server in the receiver namespace did not start listening")
                time.sleep(0.05)
            out = subprocess.run(["taskset", "-c", str(SENDER_CPU), "ip", "netns", "exec", self.ns_send,
                                  "iperf3", "-c", TCP_IP, "-p", "5201", "-C", "cubic", "-t", f"{self.seconds:g}",
                                  "-O", f"{WARMUP_S:g}", "-J"], capture_output=True, text=True,
                                 timeout=self.seconds + 30).stdout
            received, _ = iperf3_rates(out, "TCP across the switch")
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()
            forget_pid(self.run_dir, "iperf3-server")
        return {"mbps": received}

    # ---- the soft switch --------------------------------------------------------------------
    def start_switch(self, fidelity: bool = True) -> PinnedSoftSwitch:
        (grpc_port,) = free_ports(1)
        switch = PinnedSoftSwitch("bench", 1, grpc_port, self.run_dir, [(1, self.port1), (2, self.port2)], {},
                                  fidelity=fidelity)
        switch.launch()
        switch.wait_ready()
        asyncio.run(program(switch.grpc_address))
        return switch

    def start_bmv2(self) -> PinnedBmv2:
        """BMv2 with p4c's output of starnet.p4, its queues without a rate limit (the BMv2 default)."""
        grpc_port, thrift_port = free_ports(2)
        switch = PinnedBmv2("bench-bmv2", 1, grpc_port, self.run_dir, [(1, self.port1), (2, self.port2)],
                            {1: (0.0, 1024), 2: (0.0, 1024)}, thrift_port=thrift_port)
        json_path, p4info_path = compile_p4()
        switch.launch()
        switch.wait_ready()
        asyncio.run(program(switch.grpc_address, P4Schema.load(p4info_path), json_path.read_bytes()))
        return switch

    # ---- the Linux bridge -------------------------------------------------------------------
    def start_bridge(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        for port in (self.port1, self.port2):
            sh("ip", "link", "set", port, "master", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        # The sink MAC is unknown to the bridge, so it floods: to the one other port, as forwarding would.

    def stop_bridge(self) -> None:
        sh("ip", "link", "del", self.bridge)


async def program(address: str, schema: P4Schema | None = None, device_config: bytes = b"") -> None:
    schema = schema or P4Schema.load()
    session = SwitchSession("bench", address, 1, schema)
    await session.connect()
    await session.set_pipeline(device_config)
    updates = []
    # group 1: the UDP blast, to a MAC nobody owns; 2: TCP to the receiver; 3: ACKs back to the sender
    for group, (ip, port, dmac) in enumerate(((RECEIVER_IP, 2, SINK_MAC), (TCP_IP, 2, RECEIVER_MAC),
                                              (SENDER_IP, 1, SENDER_MAC)), 1):
        nhop = ent.action(schema, "StarIngress.set_nhop", port=port, smac=SWITCH_MAC, dmac=dmac)
        updates += [ent.insert(ent.member(schema, "StarIngress.ecmp_selector", group, nhop)),
                    ent.insert(ent.group(schema, "StarIngress.ecmp_selector", group, [(group, 2)])),
                    ent.insert(ent.table_entry(schema, "StarIngress.ipv4_lpm",
                                               {"hdr.ipv4.dst_addr": (ip, 32)}, group_id=group))]
    for port, role in ((1, 1), (2, 1)):
        updates.append(ent.insert(ent.table_entry(
            schema, "StarIngress.port_role", {"standard_metadata.ingress_port": port},
            action_call=ent.action(schema, "StarIngress.set_port_role", role=role))))
        updates.append(ent.insert(ent.table_entry(
            schema, "StarEgress.port_config", {"standard_metadata.egress_port": port},
            action_call=ent.action(schema, "StarEgress.set_port_config", capacity_mbps=100000,
                                   ecn_threshold_pkts=16))))
    await session.write(updates)
    await session.close()


async def enable_int(address: str) -> None:
    """INT on every packet: the sender's port is host-facing (source), the receiver's a sink that
    strips INT and reports to the CPU port (rate-limited per flow, as in the testbed)."""
    schema = P4Schema.load()
    session = SwitchSession("bench", address, 1, schema)
    await session.connect()
    await session.write([
        ent.insert(ent.table_entry(schema, "StarIngress.int_source", {"hdr.ipv4.protocol": (17, 0xFF)},
                                   action_call=ent.action(schema, "StarIngress.int_watch", sample_log2=0),
                                   priority=1)),
        ent.insert(ent.table_entry(schema, "StarIngress.int_sink", {"standard_metadata.egress_spec": 2},
                                   action_call=ent.action(schema, "StarIngress.set_int_sink"))),
        ent.insert(ent.clone_session(REPORT_SESSION, CPU_PORT)),
    ])
    await session.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per point")
    parser.add_argument("--sizes", default="60,1514", help="frame sizes without FCS, comma-separated")
    parser.add_argument("--bmv2", choices=("auto", "yes", "no"), default="auto",
                        help="measure simple_switch_grpc too (auto: when BMv2 and p4c are on PATH)")
    args = parser.parse_args()
    with_bmv2 = args.bmv2 == "yes" or (args.bmv2 == "auto" and not bmv2_missing())
    if with_bmv2 and bmv2_missing():
        print(f"softswitch_pps: {', '.join(bmv2_missing())} not on PATH", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("softswitch_pps: needs root (network namespaces); run as root or with sudo", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    run_dir = new_run_dir("bench-pps")
    bench = Bench(run_dir, args.seconds)
    try:
        bench.build()
        console.log(f"run directory {run_dir}")

        def measure_all(key: str, label: str, dst_mac: str) -> None:
            for result in results:
                console.log(f"{label}, {result['size'] + 4} B frames, {args.seconds:.0f} s ...")
                result[key] = bench.measure(result["size"], dst_mac)

        results: list[dict] = [{"size": size} for size in sizes]
        tcp: dict[str, dict] = {}
        switch = bench.start_switch()
        try:
            measure_all("soft", "soft switch", SWITCH_MAC)
            console.log(f"soft switch, one TCP flow, {args.seconds:.0f} s ...")
            tcp["soft"] = bench.measure_tcp((SWITCH_MAC, SWITCH_MAC))
            asyncio.run(enable_int(switch.grpc_address))
            measure_all("soft_int", "soft switch with INT on every packet", SWITCH_MAC)
        finally:
            switch.stop()
        switch = bench.start_switch(fidelity=False)
        try:
            measure_all("soft_nofid", "soft switch without the fidelity monitor", SWITCH_MAC)
        finally:
            switch.stop()
        if with_bmv2:
            switch = bench.start_bmv2()
            try:
                measure_all("bmv2", "BMv2 simple_switch_grpc", SWITCH_MAC)
                console.log(f"BMv2, one TCP flow, {args.seconds:.0f} s ...")
                tcp["bmv2"] = bench.measure_tcp((SWITCH_MAC, SWITCH_MAC))
            finally:
                switch.stop()
        bench.start_bridge()
        try:
            measure_all("bridge", "Linux bridge", SINK_MAC)
            console.log(f"Linux bridge, one TCP flow, {args.seconds:.0f} s ...")
            tcp["bridge"] = bench.measure_tcp(None)
        finally:
            bench.stop_bridge()
    finally:
        bench.destroy()
    table = Table(title="soft switch vs Linux bridge (one process, full pipeline, no rate limit)")
    for column in ("frame", "offered kpps", "soft switch kpps", "soft Mbit/s", "bridge kpps", "soft / bridge",
                   "with INT kpps", "INT / no INT", "monitor off kpps", "on / off"):
        table.add_column(column, justify="right")
    for r in results:
        soft, bridge = r["soft"], r["bridge"]
        table.add_row(f"{r['size'] + 4} B", f"{soft['offered_kpps']:.0f}", f"{soft['kpps']:.1f}",
                      f"{soft['kpps'] * 1e3 * (r['size'] + 4) * 8 / 1e6:.0f}", f"{bridge['kpps']:.1f}",
                      f"{soft['kpps'] / bridge['kpps']:.2f}" if bridge["kpps"] else "n/a",
                      f"{r['soft_int']['kpps']:.1f}", f"{r['soft_int']['kpps'] / soft['kpps']:.2f}",
                      f"{r['soft_nofid']['kpps']:.1f}", f"{soft['kpps'] / r['soft_nofid']['kpps']:.3f}")
    console.print(table)
    if with_bmv2:
        targets = Table(title="soft switch vs BMv2 simple_switch_grpc, same veths, same run")
        for column in ("frame", "offered kpps", "soft switch kpps", "BMv2 kpps", "soft / BMv2"):
            targets.add_column(column, justify="right")
        for r in results:
            soft, bmv2 = r["soft"]["kpps"], r["bmv2"]["kpps"]
            targets.add_row(f"{r['size'] + 4} B", f"{r['bmv2']['offered_kpps']:.0f}", f"{soft:.1f}", f"{bmv2:.2f}",
                            f"{soft / bmv2:.0f}" if bmv2 else "n/a")
        console.print(targets)
    console.print("TCP across one switch (one iperf3 cubic flow, 1500 B packets, data and ACKs through it): "
                  + ", ".join(f"{name} {t['mbps']:.0f} Mbit/s" for name, t in tcp.items()))
    for r in results:
        cost = 1 - r["soft"]["kpps"] / r["soft_nofid"]["kpps"]
        console.print(f"fidelity monitor cost at {r['size'] + 4} B: {100 * cost:+.1f}% of kpps "
                      f"(goal <= 5%): {'MET' if cost <= 0.05 else 'NOT MET'}")
    (run_dir / "results.json").write_text(json.dumps({"frames": results, "tcp": tcp}, indent=2))
    console.log(f"results in {run_dir / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
