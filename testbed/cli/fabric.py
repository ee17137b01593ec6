"""The CLI's fabric commands: iperf, int, advice, mode, switches, servers, queues, fidelity."""

from __future__ import annotations

import grpc

from controller.program import INT_SAMPLE_LOG2
from emulation.fidelity import read_records, recent
from emulation.p4read import drop_reasons
from emulation.traffic import iperf3_tcp
from testbed.cli.base import Commands
from wire import advice_pb2 as pb
from wire import advice_pb2_grpc as pb_grpc
from wire.adviceclient import channel, get_state

FIDELITY_SECONDS = 10.0


class FabricCommands(Commands):
    """Showing and steering the fabric: iperf, int, advice, mode, switches, servers, queues, fidelity."""

    def do_iperf(self, line: str) -> None:
        """iperf [client server] [seconds]: one iperf3 TCP flow (default: first host to last), in Mbit/s."""
        args = line.split()
        hosts = self.mn.hosts
        names = args[:2] if len(args) >= 2 else [hosts[0].name, hosts[-1].name]
        seconds = int(args[2]) if len(args) > 2 and args[2].isdigit() else 5
        try:
            client, server = (self.mn.get(n) for n in names)
        except KeyError as exc:
            self.stdout.write(f"unknown host {exc}\n")
            return
        if client is None or server is None:
            self.stdout.write(f"unknown host in {' '.join(names)}\n")
            return
        self.stdout.write(f"*** iperf3: TCP {client.name} -> {server.name} for {seconds} s\n")
        try:
            received, sent = iperf3_tcp(client, server, seconds)
        except RuntimeError as exc:
            self.stdout.write(f"{exc}\n")
            return
        self.stdout.write(f"*** Results: {received:.2f} Mbit/s received, {sent:.2f} Mbit/s sent\n")

    def do_int(self, line: str) -> None:
        """int [switch[:port]]: INT telemetry from the controller's collector — per-port utilisation,
        rate, queue and hop latency, and the last path each flow took."""
        switch, _, port = (line.split() or [""])[0].partition(":")
        if switch and switch not in self.tb.switches:
            self.stdout.write(f"unknown switch {switch!r}\n")
            return
        if port and not port.isdigit():
            self.stdout.write(f"bad port {port!r}: int [switch[:port]]\n")
            return
        try:
            state = get_state(self.tb.run_dir, switch, int(port or 0), include_flows=True)
        except (OSError, grpc.RpcError) as exc:
            self.stdout.write(f"controller not reachable: {exc}\n")
            return
        self.stdout.write(f"{state.reports} INT reports ({state.bad_reports} malformed)\n")
        if not state.ports:
            every = 1 << INT_SAMPLE_LOG2
            self.stdout.write(f"no telemetry yet (INT starts on 1 in {every} packets of host TCP/UDP flows)\n")
        else:
            self.stdout.write("switch port   util  Mbit/s  queue  latency_us  age_s\n")
        for p in state.ports:
            util = f"{p.utilisation:5.2f}" if p.has_rate else "    -"
            rate = f"{p.tx_rate_mbps:6.1f}" if p.has_rate else "     -"
            self.stdout.write(f"{p.switch:6} {p.port:>4}  {util}  {rate}  {p.queue_pkts:>5}  {p.hop_latency_us:>10}"
                              f"  {p.age_s:5.1f}\n")
        for f in state.flows:
            proto = {6: "tcp", 17: "udp"}.get(f.protocol, str(f.protocol))
            path = " ".join(f"{h.switch}[{h.ingress_port}->{h.egress_port}]" for h in f.hops)
            self.stdout.write(f"  {proto} {f.src}:{f.src_port} -> {f.dst}:{f.dst_port}  {path}"
                              f"  ({f.age_s:.1f} s ago)\n")

    def _stub(self) -> tuple[grpc.Channel, pb_grpc.AdviceStub]:

        ch = channel(self.tb.run_dir)
        return ch, pb_grpc.AdviceStub(ch)

    def do_advice(self, line: str) -> None:
        """advice [host]: the rate advice in force (per source host and destination) and the mode."""
        host = line.strip()
        try:
            ch, stub = self._stub()
            with ch:
                table = stub.GetAdvice(pb.GetAdviceRequest(host=host), timeout=3)
        except grpc.RpcError as exc:
            self.stdout.write(f"{exc.details() or exc}\n")
            return
        except OSError as exc:
            self.stdout.write(f"controller not reachable: {exc}\n")
            return
        self.stdout.write(f"mode {table.mode}, {table.decisions} decisions\n")
        if not table.entries:
            self.stdout.write("no advice in force" + (" (mode advice starts it)" if table.mode != "advice" else "")
                              + "\n")
        for e in table.entries:
            src = self.tb.plan.host_by_ip(e.src).name
            dst = self.tb.plan.host_by_ip(e.dst).name
            rate = f"{e.rate_bps / 1e6:7.2f} Mbit/s" if e.rate_bps else "  line rate"
            self.stdout.write(f"  {src:>4} -> {dst:<4} {rate}  epoch {e.epoch}  ({e.age_s:.1f} s ago)\n")

    def do_mode(self, line: str) -> None:
        """mode [none|ecn|advice|bbr|paths]: show or switch the control mode of the running testbed (ecn and bbr
        apply to TCP connections opened after the switch)."""
        mode = line.strip()
        try:
            ch, stub = self._stub()
            with ch:
                if mode:
                    reply = stub.SetMode(pb.ModeRequest(mode=mode), timeout=3)
                    self.stdout.write(f"mode {reply.mode}\n")
                else:
                    self.stdout.write(f"mode {stub.GetAdvice(pb.GetAdviceRequest(), timeout=3).mode}\n")
        except grpc.RpcError as exc:
            self.stdout.write(f"{exc.details() or exc}\n")
        except OSError as exc:
            self.stdout.write(f"controller not reachable: {exc}\n")

    def do_switches(self, line: str) -> None:
        """switches: each P4 switch with its device id, P4Runtime address and process state."""
        for name, sw in self.tb.switches.items():
            state = "running" if sw.proc and sw.proc.poll() is None else "stopped"
            self.stdout.write(f"{name:6} device {sw.device_id:<3} {sw.kind:5} {sw.grpc_address:22} {state}\n")

    def do_servers(self, line: str) -> None:
        """servers: each multi-GPU server's GPUs with their rail (the leaf of their NIC), NIC and
        NVLink addresses, NVLink rate and the bytes each sent and received over NVLink."""
        topo = self.tb.topo
        if not topo.servers:
            self.stdout.write(f"{topo.name} has no multi-GPU servers (try: make run TOPO=railopt)\n")
            return
        counters = self.tb.nvlink_counters()
        self.stdout.write(f"{'server':8} {'GPU':5} {'rail':5} {'NIC':12} {'NVLink':12} {'Mbit/s':>7} "
                          f"{'sent B':>12} {'received B':>12}\n")
        for server in topo.servers:
            for gpu in server.gpus:
                sent, received = counters[gpu]
                self.stdout.write(f"{server.name:8} {gpu:5} {topo.host_link(gpu).other(gpu):5} "
                                  f"{self.tb.plan.hosts[gpu].ip:12} {self.tb.plan.nvlink[gpu]:12} "
                                  f"{topo.nvlink_mbps(gpu):7g} {sent:12} {received:12}\n")

    def do_queues(self, line: str) -> None:
        """queues [switch]: drops by reason (the P4 counter drop_reason, read over P4Runtime) and, on
        soft switches, per-port egress queue depth, maximum, tail drops and tx."""
        names = line.split() or list(self.tb.switches)
        for name in names:
            sw = self.tb.switches.get(name)
            if sw is None:
                self.stdout.write(f"unknown switch {name!r}\n")
                continue
            try:
                reasons = drop_reasons(sw.grpc_address, sw.device_id, self.tb.schema_of(name))
            except grpc.RpcError as exc:
                self.stdout.write(f"{name}: drop_reason read failed: {exc.code().name} {exc.details()}\n")
            else:
                dropped = [f"{reason} {pkts}" for reason, (pkts, _) in reasons.items() if pkts]
                total = sum(pkts for pkts, _ in reasons.values())
                self.stdout.write(f"{name}: dropped {total} ({', '.join(dropped) or 'nothing'})\n")
            try:
                stats = self.tb.switch_stats(name)
            except (OSError, ValueError):
                continue  # BMv2: queue depths are not in its stats (only the soft data plane writes them)
            for port, p in sorted(stats["ports"].items(), key=lambda kv: int(kv[0])):
                self.stdout.write(
                    f"  port {port:>3} {p['iface']:10} q {p['qdepth_pkts']:>3}/{p['depth_pkts']:<3} "
                    f"max {p['max_qdepth_pkts']:>3} drops {p['queue_drops']:>6} tx {p['tx_pkts']:>9} pkts "
                    f"{p['rate_mbps']:.0f} Mbps\n")

    def do_fidelity(self, line: str) -> None:
        """fidelity [seconds]: per switch, controller and host agent over the last seconds (default 10):
        100 ms windows seen, windows with a late event, worst lateness, frames or wake-ups; and the verdict."""
        try:
            seconds = float(line.split()[0]) if line.split() else FIDELITY_SECONDS
        except ValueError:
            self.stdout.write(f"fidelity: expected seconds, got {line.strip()!r}\n")
            return
        records = read_records(self.tb.fidelity_path)
        now = self.tb.now()
        rows = recent(records, now, seconds)
        if not rows:
            self.stdout.write(f"fidelity: no records in the last {seconds:g} s ({self.tb.fidelity_path})\n")
            return
        tolerance = next((s.process.fidelity_tolerance_ms for s in self.tb.switches.values()), None)
        self.stdout.write(f"last {seconds:g} s, late = above {tolerance or 'the default'} ms "
                          "(switch: departure/receive lateness; loop: wake-up lag)\n")
        self.stdout.write(f"{'source':12} {'kind':6} {'windows':>7} {'late':>5} {'worst ms':>9} "
                          f"{'frames/wakes':>12} {'drops':>6}\n")
        for source, r in sorted(rows.items(), key=lambda kv: (kv[1]["kind"] != "switch", kv[0])):
            self.stdout.write(f"{source:12} {r['kind']:6} {r['windows']:>7} {r['late_windows']:>5} "
                              f"{r['worst_ms']:>9.1f} {r['events']:>12} {r['drops']:>6}\n")
        self.stdout.write(f"verdict: {self.tb.verdict(now - seconds, now).line()}\n")
