"""The testbed's Mininet CLI: Mininet's commands (pingall, iperf, hN cmd ...) plus a banner and
`switches` / `queues` / `int` / `advice` / `mode` / `fidelity` to show and steer the fabric, and
`allreduce` / `incast` / `flows` / `jobs` to run collectives and flows on it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from mininet.cli import CLI

from controller.advice import MODES
from controller.program import INT_SAMPLE_LOG2
from emulation import budget
from emulation.fidelity import read_records, recent
from emulation.net import Testbed, TestbedError
from emulation.p4read import drop_reasons
from emulation.traffic import iperf3_tcp

if TYPE_CHECKING:
    from wire import advice_pb2_grpc as pb_grpc
    from workloads.hosts import BackgroundJob

FIDELITY_SECONDS = 10.0


def banner(tb: Testbed) -> str:
    topo = tb.topo
    lines = [
        f"StarNet testbed: {topo.name} on the {tb.dataplane} data plane",
        f"  {len(topo.switches)} P4 switches, {len(topo.hosts)} hosts, {len(topo.links)} links, "
        f"programmed over P4Runtime by the controller",
        f"  run directory: {tb.run_dir}",
        f"  switches: {', '.join(sorted({sw.process.scheduling for sw in tb.switches.values()}))} scheduling; "
        f"{budget.full_load(topo).line()}",
        "  logs: switches/<name>.log, controller.log, p4runtime-requests.log",
        "  try: pingall | iperf h1 h8 | h1 ping -c3 h8 | switches | queues s3 | int s3 | advice | mode advice",
        "       allreduce h1 h2 h5 h6 size=8M algo=ring|tree|hd|auto iters=5 [bg] | incast h5 h1 h2 h3 size=1M",
        "       flows all load=0.3 seconds=10 [bg] | jobs | fidelity | exit",
    ]
    return "\n".join(lines) + "\n"


def percent(word: str) -> float:
    return float(word.rstrip("%"))


def mbps_or_off(word: str) -> float | None:
    """A drain rate > 0, or None for "off"."""
    if word == "off":
        return None
    mbps = float(word)
    if mbps <= 0:
        raise ValueError(word)
    return mbps


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def convert(word: str) -> float:
        value = kind(word)
        if value <= 0:
            raise ValueError(word)
        return value
    return convert


def parse_args(line: str, kinds: tuple[Callable[[str], Any], ...], defaults: tuple = ()) -> list | None:
    """The words of a command line, each through its converter; the last len(defaults) may be left
    out and take those. None when the count or a word is wrong (the caller prints its usage)."""
    words = line.split()
    if not len(kinds) - len(defaults) <= len(words) <= len(kinds):
        return None
    try:
        values = [kind(word) for kind, word in zip(kinds, words, strict=False)]
    except ValueError:
        return None
    missing = len(kinds) - len(words)
    return values + list(defaults[len(defaults) - missing:])


class StarNetCLI(CLI):
    prompt = "mininet> "

    def __init__(self, tb: Testbed, **kwargs: Any) -> None:
        self.tb = tb
        self.jobs: list[BackgroundJob] = []  # all-reduce and flow jobs started from this CLI
        assert tb.net is not None
        tb.net.stdout_banner = banner(tb)
        super().__init__(tb.net, **kwargs)

    def preloop(self) -> None:
        self.stdout.write(banner(self.tb))
        super().preloop()

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
        from wire.adviceclient import get_state

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
        from wire import advice_pb2_grpc as pb_grpc
        from wire.adviceclient import channel

        ch = channel(self.tb.run_dir)
        return ch, pb_grpc.AdviceStub(ch)

    def do_advice(self, line: str) -> None:
        """advice [host]: the rate advice in force (per source host and destination) and the mode."""
        from wire import advice_pb2 as pb

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
        """mode [none|ecn|advice|bbr]: show or switch the control mode of the running testbed (ecn and bbr
        apply to TCP connections opened after the switch)."""
        from wire import advice_pb2 as pb

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

    # ---- workloads ---------------------------------------------------------------------------
    def _words(self, line: str, allowed: tuple[str, ...]) -> tuple[list[str], dict[str, str], bool]:
        """HOST... key=value... [bg]: the hosts (`all` = every host), the options, and whether in the background."""
        words = line.split()
        hosts = [w for w in words if "=" not in w and w not in ("bg", "&")]
        options = dict(w.split("=", 1) for w in words if "=" in w)
        if hosts == ["all"]:
            hosts = [h.name for h in self.mn.hosts]
        unknown = set(options) - set(allowed)
        if unknown:
            raise ValueError(f"unknown option {', '.join(sorted(unknown))} ({', '.join(allowed)})")
        return hosts, options, "bg" in words or "&" in words

    def _launch(self, job: BackgroundJob, background: bool) -> None:
        self.jobs.append(job)
        if background:
            job.start()
            self.stdout.write(f"{job.name} started in the background (`jobs` shows it)\n")
            return
        job.run(lambda text: self.stdout.write(text + "\n"))
        self.stdout.write(job.describe(full=True) + "\n")

    def do_allreduce(self, line: str) -> None:
        """allreduce HOST... [size=8M] [algo=ring|tree|hd|auto] [iters=5] [chunk=256K] [cc=cubic]
        [order=topology|given] [bg]: an all-reduce over the hosts (`all` = every host), printed as an
        nccl-tests table; `bg` runs it in the background (see `jobs`)."""
        from workloads.allreduce.job import JobSpec, background
        from workloads.fabric import FabricView
        from workloads.hosts import JobError, parse_size

        try:
            hosts, options, bg = self._words(line, ("size", "algo", "iters", "chunk", "cc", "order", "warmup"))
            spec = JobSpec(hosts=hosts, sizes=[parse_size(options.get("size", "8M"))],
                           algo=options.get("algo", "ring"), iters=int(options.get("iters", 5)),
                           warmup=int(options.get("warmup", 1)), chunk_bytes=parse_size(options.get("chunk", "256K")),
                           cc=options.get("cc"), order=options.get("order", "topology"),
                           name=f"allreduce{len(self.jobs) + 1}")
            spec.check()
            view = FabricView.of_testbed(self.tb)
            view.endpoints(spec.hosts, spec.order)  # unknown hosts are named here, before anything starts
        except (JobError, ValueError) as exc:
            self.stdout.write(f"allreduce: {exc}\n")
            return
        self._launch(background(spec, view), bg)

    def do_incast(self, line: str) -> None:
        """incast RECEIVER SENDER... [size=1M] [cc=cubic] [bg]: every sender sends size bytes to the
        receiver at once; per-sender completion time and goodput, Jain fairness (see `jobs`)."""
        from workloads.fabric import FabricView
        from workloads.flows.job import background_job
        from workloads.flows.schedule import incast
        from workloads.hosts import JobError, parse_size

        try:
            hosts, options, bg = self._words(line, ("size", "cc"))
            if len(hosts) < 2:
                raise ValueError("give the receiver, then at least one sender")
            view = FabricView.of_testbed(self.tb)
            view.endpoints(hosts, "given")
            flows = incast(hosts[0], hosts[1:], parse_size(options.get("size", "1M")))
        except (JobError, ValueError) as exc:
            self.stdout.write(f"incast: {exc}\n")
            return
        self._launch(background_job(f"incast{len(self.jobs) + 1}", flows, view, "incast", options.get("cc")), bg)

    def do_flows(self, line: str) -> None:
        """flows HOST...|all [load=0.3] [seconds=10] [seed=1] [min=16K] [max=2M] [cc=cubic] [bg]: background
        flows, Poisson arrivals between random pairs of the hosts offering load of each host's link,
        log-uniform sizes; completion times per size (see `jobs`)."""
        from workloads.fabric import FabricView
        from workloads.flows.job import background_job
        from workloads.flows.schedule import background
        from workloads.hosts import JobError, parse_size

        try:
            hosts, options, bg = self._words(line, ("load", "seconds", "seed", "min", "max", "cc"))
            view = FabricView.of_testbed(self.tb)
            view.endpoints(hosts, "given")
            flows = background(hosts, float(options.get("seconds", 10)), float(options.get("load", 0.3)),
                               view.link_mbps(hosts), int(options.get("seed", 1)),
                               parse_size(options.get("min", "16K")), parse_size(options.get("max", "2M")))
        except (JobError, ValueError) as exc:
            self.stdout.write(f"flows: {exc}\n")
            return
        self._launch(background_job(f"flows{len(self.jobs) + 1}", flows, view, "background", options.get("cc")), bg)

    def do_fail(self, line: str) -> None:
        """fail A B | fail SWITCH: take the link A-B down (both ends, a cut cable), or every link of
        SWITCH; then the controller's detection and re-route as it logs them (links.csv)."""
        self._set_links(line, up=False)

    def do_restore(self, line: str) -> None:
        """restore A B | restore SWITCH: bring the link(s) back; the controller returns them to service
        after its hold-down."""
        self._set_links(line, up=True)

    def do_loss(self, line: str) -> None:
        """loss A B PERCENT: lose PERCENT of the frames A sends to B (one direction; B a switch, whose
        fault_inject drops them, the controller's probes too); loss A B 0 clears it."""
        def apply(sender: str, receiver: str, share: float) -> str:
            self.tb.set_link_loss(sender, receiver, share)
            return f"{sender} -> {receiver}: {share:g}% of frames lost" if share else \
                f"{sender} -> {receiver}: no injected loss"

        self._inject(line, "loss", "the sender, the receiving switch and a percentage, e.g. loss s1 s3 2",
                     (str, str, percent), apply)

    def do_slow(self, line: str) -> None:
        """slow SWITCH MS: every frame SWITCH forwards is held MS ms (a slow switch; soft switch only).
        slow HOST MS: the all-reduce ranks on HOST take MS ms longer over every piece they reduce or
        copy (a slow host). slow NODE 0 clears it."""
        def apply(node: str, delay: float) -> str:
            if self.tb.topo.is_host(node):
                self.tb.set_host_faults(node, delay)
                return f"{node}: its ranks take {delay:g} ms longer per piece" if delay else \
                    f"{node}: no added compute delay"
            if not self.tb.topo.is_switch(node):
                raise TestbedError(f"no switch or host {node!r} in {self.tb.topo.name}")
            self.tb.set_switch_faults(node, delay_ms=delay)
            return f"{node}: every frame held {delay:g} ms" if delay else f"{node}: no added delay"

        self._inject(line, "slow", "a switch or host and a delay in ms, e.g. slow s3 5 or slow h2 20 (slow s3 0 "
                     "clears)", (str, float), apply)

    def do_rate(self, line: str) -> None:
        """rate A B MBPS: A's port toward B drains at MBPS (a port running below its capacity);
        rate A B off restores it."""
        def apply(switch: str, neighbour: str, mbps: float | None) -> str:
            self.tb.set_switch_faults(switch, rates={neighbour: mbps})
            return f"{switch} -> {neighbour}: {'as configured' if mbps is None else f'{mbps:g} Mbit/s'}"

        self._inject(line, "rate", "a switch, its neighbour and Mbit/s, e.g. rate s3 s1 10 (rate s3 s1 off)",
                     (str, str, mbps_or_off), apply)

    def _inject(self, line: str, command: str, usage: str, kinds: tuple[Callable[[str], Any], ...],
                apply: Callable[..., str]) -> None:
        """A fault command: its arguments (the usage when they are wrong), then `apply` to them, which
        says what it did or raises TestbedError."""
        args = parse_args(line, kinds)
        if args is None:
            self.stdout.write(f"{command}: give {usage}\n")
            return
        try:
            self.stdout.write(apply(*args) + "\n")
        except TestbedError as exc:
            self.stdout.write(f"{command}: {exc}\n")

    def do_diagnose(self, line: str) -> None:
        """diagnose: the controller's fault localisation now: suspects, strongest first, with evidence,
        and the alerts it raised."""
        from wire.adviceclient import diagnose

        try:
            d = diagnose(self.tb.run_dir)
        except grpc.RpcError as exc:
            self.stdout.write(f"diagnose: the controller did not answer: {exc.details()}\n")
            return
        if not d.updated:
            self.stdout.write("diagnose: no localisation yet (it runs every second)\n")
            return
        if not d.suspects:
            self.stdout.write("no suspects: counters, link states and INT show nothing wrong\n")
        for i, s in enumerate(d.suspects, 1):
            flag = "ALERT" if s.alert else "     "
            self.stdout.write(f"{i:2}. {flag} {s.target:14} {s.fault:12} score {s.score:.2f}, for "
                              f"{max(0.0, d.updated - s.since):.0f} s: {s.evidence}\n")
        for a in d.alerts[-5:]:
            at = time.strftime("%H:%M:%S", time.localtime(a.time))
            self.stdout.write(f"  alert at {at}: {a.suspect.target} ({a.suspect.fault})\n")

    def do_flap(self, line: str) -> None:
        """flap A B [COUNT [PERIOD_S]]: take the link A-B down and up COUNT times (default 10), one
        cycle every PERIOD_S (default 0.5 s); then the controller's view of it."""
        args = parse_args(line, (str, str, positive(int), positive(float)), defaults=(10, 0.5))
        if args is None:
            self.stdout.write("flap: give a link and optionally a count and a period, e.g. flap s4 s2 10 0.5\n")
            return
        a, b, count, period = args
        from topologies import TopologyError

        try:
            self.tb.topo.find_link(a, b)
        except TopologyError as exc:
            self.stdout.write(f"flap: {exc}\n")
            return
        self.stdout.write(f"flapping {a}-{b} {count} times, every {period:g} s ...\n")
        ups = self.tb.flap_link(a, b, int(count), period)
        self._report_links({"-".join(sorted((a, b))): ups[-1]}, up=True)

    def _set_links(self, line: str, up: bool) -> None:
        from topologies import TopologyError

        words = line.split()
        topo = self.tb.topo
        try:
            if len(words) == 2:
                pairs = [(words[0], words[1])]
            elif len(words) == 1 and topo.is_switch(words[0]):
                pairs = [(words[0], other) for other, _ in topo.neighbours(words[0])]
            else:
                raise TopologyError("give two ends of a link (fail s3 s1) or one switch (fail s3)")
            times = [(a, b, self.tb.set_link(a, b, up)) for a, b in pairs]
        except TopologyError as exc:
            self.stdout.write(f"{'restore' if up else 'fail'}: {exc}\n")
            return
        state = "up" if up else "down"
        for a, b, at in times:
            self.stdout.write(f"link {a}-{b} {state} at {time.strftime('%H:%M:%S', time.localtime(at))}"
                              f".{int(at * 1000) % 1000:03d}\n")
        fabric = {"-".join(sorted((a, b))): at for a, b, at in times if topo.is_switch(a) and topo.is_switch(b)}
        if not fabric:
            return  # a host link: no probes cross it; the switch's port watch moves its traffic
        self._report_links(fabric, up)

    def _report_links(self, fabric: dict[str, float], up: bool) -> None:
        """The controller's timeline rows for these links (name → wall time of the change) as they come."""
        state = "up" if up else "down"
        deadline = time.monotonic() + 2.0 + (0.0 if not up else 1.0)
        seen: set[str] = set()
        while time.monotonic() < deadline and len(seen) < len(fabric):
            for row in self.tb.links_timeline():
                link = row["link"]
                detected = float(row["detected_wall"])
                if link not in fabric or link in seen or row["state"] != state or detected < fabric[link]:
                    continue
                seen.add(link)
                advice = f", advice re-planned after {row['advice_decided_ms']} ms" if row["advice_decided_ms"] else ""
                self.stdout.write(f"  controller: {link} {state} detected {1e3 * (detected - fabric[link]):.0f} ms "
                                  f"after, {row['route_updates']} route updates written in "
                                  f"{row['routes_written_ms']} ms{advice}\n")
            time.sleep(0.05)
        for link in sorted(set(fabric) - seen):
            self.stdout.write(f"  controller: no {state} for {link} in its timeline yet (links.csv)\n")

    def do_scenario(self, line: str) -> None:
        """scenario FILE [modes=none,advice]: run a scenario file's jobs and faults on this testbed, once per
        mode (its topology must be this one), and write its report (see `report`)."""
        from lab.experiment import run_on_testbed
        from lab.report import report_table
        from lab.scenario import ScenarioError, load_scenario

        words = line.split()
        if not words:
            self.stdout.write("scenario: give a scenario file, e.g. scenario experiments/demo.yaml\n")
            return
        try:
            scenario = load_scenario(words[0])
            for word in words[1:]:
                key, _, value = word.partition("=")
                if key != "modes" or not value:
                    raise ScenarioError(f"{word!r}: the only option is modes=a,b")
                scenario.modes = value.split(",")
                bad = [m for m in scenario.modes if m not in MODES]
                if bad:
                    raise ScenarioError(f"modes: {', '.join(bad)} not one of {', '.join(MODES)}")
            result = run_on_testbed(self.tb, scenario, progress=lambda text: self.stdout.write(text + "\n"))
        except ScenarioError as exc:
            self.stdout.write(f"scenario: {exc}\n")
            return
        self.stdout.write("\n" + report_table(result.out_dir / "report.md") + "\n")

    def do_report(self, line: str) -> None:
        """report: the first table of the last scenario report (under runs/), and where it is."""
        from lab.report import last_report, report_table

        path = last_report()
        if path is None:
            self.stdout.write("report: no scenario report yet (scenario FILE, or make demo)\n")
            return
        self.stdout.write(f"{path}\n\n{report_table(path)}\n")

    def do_jobs(self, line: str) -> None:
        """jobs: the all-reduce and flow jobs started in this session, with their results."""
        if not self.jobs:
            self.stdout.write("no jobs yet (allreduce, incast, flows)\n")
        for job in self.jobs:
            self.stdout.write(job.describe() + "\n")

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
