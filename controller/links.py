"""Link liveness from probes: a probe leaves every fabric port every `period_s`, stamped with its
send time (sent by the switch itself, or by the controller as a packet-out: wire/probes.py); the
switch at the other end punts it (EtherType 0x88B5, reason PROBE) and the controller learns that
direction of the link carried it.

A probe's way is long — the controller's stream, the sending switch, the link, the receiving
switch's punt path, its stream, the controller's event loop — and on a busy machine any of them
can stall for tens of milliseconds. So a direction A→B counts as failed only on evidence that the
link, not the way, lost it: B has since received probes sent more than `misses` periods later over
its other links (its punt path works), and A's probes sent that much later have reached other
switches (its send path works). Without that evidence (a switch with one fabric link, or a whole
switch gone quiet) a direction is failed after silence while other switches' probes kept coming
(silence everywhere at once is the way's: the controller's streams backlogged, not 32 links failing
together) — `stall_s` if one of its switches lost its P4Runtime stream (its process died), `hung_s`
if both streams are up: a switch whose control threads starve on a saturated machine punts nothing
for seconds (measured on the k=4 fat-tree at 1 Mbit/s: 4 s, many switches at once) while its links
carry traffic, and a link that fails there still shows the evidence above. A link is down when a
direction failed, and back up when both directions have carried probes without a gap of `misses`
periods for `hold_down_s`.

Port status comes first where there is one: a fabric port whose carrier is lost (either end of
the link; controller/portstatus.py watches them) fails its link at once, without waiting for
probes; it cannot return before its ports are up and probes have flowed for the hold-down. Probes
remain the only witness of what port status cannot see: a direction that loses frames with its
carrier up. Pure logic, fed with times: the controller drives it (controller/healing.py) and the tests
drive it with a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from topologies.addressing import AddressPlan
from topologies.spec import Topology
from wire import probes

End = tuple[str, int]  # (switch, port)


def probe_frame(plan: AddressPlan, switch: str, port: int, sent: float) -> bytes:
    """The probe `switch` sends out of `port` (as a packet-out from the controller, or by itself)."""
    return probes.probe_frame(probes.mac_bytes(plan.mac_of(switch, port)), plan.switches[switch].device_id, port, sent)


def parse_probe(frame: bytes, switch_of_device: dict[int, str]) -> tuple[End, float] | None:
    """((origin switch, origin port), send time) of a probe frame; None if it is not one of ours."""
    probe = probes.parse_probe(frame)
    if probe is None or probe[0] not in switch_of_device:
        return None
    return (switch_of_device[probe[0]], probe[1]), probe[2]


def fabric_ports(topo: Topology, switch: str) -> list[int]:
    """The switch's ports that face another switch: probes leave by these."""
    return sorted(port for link in topo.links if topo.is_switch(link.a) and topo.is_switch(link.b)
                  for end, port in ((link.a, link.a_port), (link.b, link.b_port)) if end == switch)


def probe_device_config(topo: Topology, plan: AddressPlan, switch: str, period_s: float) -> bytes:
    """The device config that has a soft switch send its own probes out of its fabric ports every
    period_s (wire/probes.py); empty when probes are off or it has no fabric port."""
    ports = fabric_ports(topo, switch)
    if period_s <= 0 or not ports:
        return b""
    return probes.device_config(period_s, {port: plan.mac_of(switch, port) for port in ports})


@dataclass
class LinkState:
    a: End
    b: End
    up: bool = True
    last_seen: dict[End, float] = field(default_factory=dict)  # sending end → send time of its last probe through
    good_since: float | None = None  # while down: when probes started to flow again in both directions
    down_at: float = 0.0
    carrier_lost: set[End] = field(default_factory=set)  # ends whose port reports no carrier
    probes: dict[End, int] = field(default_factory=dict)  # sending end → probes received from it (/metrics)


@dataclass(frozen=True)
class Change:
    link: frozenset[str]  # the two switches
    ends: tuple[End, End]
    up: bool
    at: float
    why: str = ""  # what showed it: "carrier lost", "probes lost on the link", "no probe for N s"


class LinkMonitor:
    def __init__(self, topo: Topology, now: float, period_s: float = 0.050, misses: int = 4,
                 hold_down_s: float = 0.5, stall_s: float = 2.0, hung_s: float = 10.0) -> None:
        self.period_s, self.misses, self.hold_down_s, self.stall_s = period_s, misses, hold_down_s, stall_s
        self.hung_s = hung_s
        self.disconnected: set[str] = set()  # switches without a P4Runtime stream at the last tick
        self.links: dict[frozenset[End], LinkState] = {}
        self.by_end: dict[End, LinkState] = {}
        for link in topo.links:
            if topo.is_switch(link.a) and topo.is_switch(link.b):
                a, b = (link.a, link.a_port), (link.b, link.b_port)
                state = LinkState(a, b, last_seen={a: now, b: now})
                self.links[frozenset((a, b))] = state
                self.by_end[a] = self.by_end[b] = state
        self.last_tick = now
        self.newest_into: dict[str, float] = {}  # switch → send time of the newest probe it received
        self.newest_from: dict[str, float] = {}  # switch → send time of its newest probe received anywhere
        self.newest_any = now  # send time of the newest probe received at all

    def ends(self) -> list[End]:
        """Every fabric port a probe is sent from."""
        return sorted(self.by_end)

    def received(self, origin: End, at: End, sent: float) -> None:
        state = self.by_end.get(origin)
        if state is None or at not in (state.a, state.b) or at == origin:
            return  # not a fabric link end we know, or wired differently than the topology says
        state.last_seen[origin] = max(state.last_seen[origin], sent)
        state.probes[origin] = state.probes.get(origin, 0) + 1
        self.newest_into[at[0]] = max(self.newest_into.get(at[0], sent), sent)
        self.newest_from[origin[0]] = max(self.newest_from.get(origin[0], sent), sent)
        self.newest_any = max(self.newest_any, sent)

    def port_status(self, end: End, up: bool, now: float) -> list[Change]:
        """A fabric port's carrier came or went (netlink oper-status); a lost one fails its link now."""
        state = self.by_end.get(end)
        if state is None:
            return []
        if up:
            state.carrier_lost.discard(end)
            return []
        state.carrier_lost.add(end)
        return self._fail(state, now, f"carrier lost at {end[0]}:{end[1]}")

    def _fail(self, state: LinkState, now: float, why: str) -> list[Change]:
        if not state.up:
            state.good_since = None
            return []
        state.up = False
        state.good_since = None
        state.down_at = now
        return [Change(frozenset((state.a[0], state.b[0])), (state.a, state.b), False, now, why)]

    def _failed(self, origin: End, state: LinkState, now: float, limit: float) -> str:
        """Why the direction from `origin` lost its probes on the link (see the module's doc); "" if it did not."""
        seen = state.last_seen[origin]
        receiver = state.b[0] if origin == state.a else state.a[0]
        if self.newest_into.get(receiver, -math.inf) - seen > limit and \
                self.newest_from.get(origin[0], -math.inf) - seen > limit:
            return f"probes from {origin[0]}:{origin[1]} lost on the link ({now - seen:.2f} s)"
        silent = min(now, self.newest_any) - seen
        lost = self.disconnected.intersection((origin[0], receiver))
        if silent > self.hung_s or (lost and silent > self.stall_s):
            cause = f", {' and '.join(sorted(lost))} without a stream" if lost else ""
            return f"no probe from {origin[0]}:{origin[1]} for {now - seen:.2f} s while others came{cause}"
        return ""

    def tick(self, now: float, disconnected: set[str] | frozenset[str] = frozenset()) -> list[Change]:
        """Links that changed state by `now`; `disconnected`: the switches without a P4Runtime stream now."""
        self.disconnected = set(disconnected)
        lag = now - self.last_tick - self.period_s
        self.last_tick = now
        if lag > self.period_s:  # the controller did not look for `lag`: give every direction that time
            for state in self.links.values():
                for end in state.last_seen:
                    state.last_seen[end] += lag
        limit = self.misses * self.period_s
        changes = []
        for state in self.links.values():
            why = ("carrier lost" if state.carrier_lost else "") or self._failed(state.a, state, now, limit) or \
                self._failed(state.b, state, now, limit)
            failed = bool(why)
            if state.up and failed:
                changes += self._fail(state, now, why)
            elif not state.up:
                if failed or min(state.last_seen.values()) <= state.down_at:  # not yet both ways again
                    state.good_since = None
                elif state.good_since is None:
                    state.good_since = now
                elif now - state.good_since >= self.hold_down_s:
                    state.up = True
                    changes.append(Change(frozenset((state.a[0], state.b[0])), (state.a, state.b), True, now))
        return changes

    def down(self) -> set[frozenset[str]]:
        """The failed links, as controller/routing.py takes them."""
        return {frozenset((s.a[0], s.b[0])) for s in self.links.values() if not s.up}
