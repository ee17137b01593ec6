"""The CLI's fault commands (fail, restore, loss, slow, rate, flap: all through emulation/faults.py)
and diagnose (the controller's fault localisation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from emulation.faults import Fault, inject
from emulation.net import TestbedError
from testbed.cli.args import mbps_or_off, parse_args, percent, positive
from testbed.cli.base import Commands
from topologies import TopologyError
from wire.adviceclient import diagnose


class FaultCommands(Commands):
    """Breaking the fabric and watching it heal: fail, restore, loss, slow, rate, flap, diagnose."""

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
            inject(self.tb, Fault("loss", (sender, receiver), percent=share))
            return f"{sender} -> {receiver}: {share:g}% of frames lost" if share else \
                f"{sender} -> {receiver}: no injected loss"

        self._inject(line, "loss", "the sender, the receiving switch and a percentage, e.g. loss s1 s3 2",
                     (str, str, percent), apply)

    def do_slow(self, line: str) -> None:
        """slow SWITCH MS: every frame SWITCH forwards is held MS ms (a slow switch; soft switch only).
        slow HOST MS: the all-reduce ranks on HOST take MS ms longer over every piece they reduce or
        copy (a slow host). slow NODE 0 clears it."""
        def apply(node: str, delay: float) -> str:
            inject(self.tb, Fault("delay", (node, node), delay_ms=delay))
            if self.tb.topo.is_host(node):
                return f"{node}: its ranks take {delay:g} ms longer per piece" if delay else \
                    f"{node}: no added compute delay"
            return f"{node}: every frame held {delay:g} ms" if delay else f"{node}: no added delay"

        self._inject(line, "slow", "a switch or host and a delay in ms, e.g. slow s3 5 or slow h2 20 (slow s3 0 "
                     "clears)", (str, float), apply)

    def do_rate(self, line: str) -> None:
        """rate A B MBPS: A's port toward B drains at MBPS (a port running below its capacity); on a
        multi-GPU server, rate GPU SERVER MBPS shapes that GPU's NVLink both ways (a degraded NVLink);
        rate A B off restores it."""
        def apply(switch: str, neighbour: str, mbps: float | None) -> str:
            inject(self.tb, Fault("rate", (switch, neighbour), mbps=mbps or 0.0))
            what = f"NVLink of {switch}-{neighbour}" if self.tb.topo.is_nvlink(switch, neighbour) else \
                f"{switch} -> {neighbour}"
            return f"{what}: {'as configured' if mbps is None else f'{mbps:g} Mbit/s'}"

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

        try:
            self.tb.topo.find_link(a, b)
        except TopologyError as exc:
            self.stdout.write(f"flap: {exc}\n")
            return
        self.stdout.write(f"flapping {a}-{b} {count} times, every {period:g} s ...\n")
        injected = inject(self.tb, Fault("flap", (a, b), count=int(count), period_s=period))
        self._report_links({"-".join(sorted((a, b))): injected.settled}, up=True)

    def _set_links(self, line: str, up: bool) -> None:

        words = line.split()
        topo = self.tb.topo
        try:
            if len(words) == 2:
                pairs = [(words[0], words[1])]
            elif len(words) == 1 and topo.is_switch(words[0]):
                pairs = [(words[0], other) for other, _ in topo.neighbours(words[0])]
            else:
                raise TopologyError("give two ends of a link (fail s3 s1) or one switch (fail s3)")
            kind = "link_up" if up else "link_down"
            times = [(a, b, inject(self.tb, Fault(kind, (a, b))).began) for a, b in pairs]
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
