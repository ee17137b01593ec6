"""Path scheduling (mode `paths`): each flow placed on one of its equal-cost paths, pinned there.

Where ECMP hashes two long flows onto one uplink while another idles, the advisor alone can only
share the crowded link. Here the controller knows every flow (INT) and every link's capacity, so it
places flows (Hedera's central scheduler, on the INT-detected flows; NSDI'10) and rates them over the
placement it chose:

- candidates: a flow's shortest paths, read from the routes the switches hold (every ECMP next hop
  from the source's leaf to the destination), so a failed link is never a candidate;
- a new flow goes, at once, on the path whose fullest link leaves it the largest share (ties: the
  path INT saw it take, so that it need not move; then fewer flows on the path; then the lowest
  numbered) — with the flows already placed counted;
- every IMPROVE_INTERVAL_S, a flow already placed is moved if the max-min fair rates of all flows
  (water-filling, `max_min_rates`) then have a product MOVE_GAIN higher (proportional fairness: a
  move that frees two flows from a shared link counts, even where a collision elsewhere keeps the
  minimum where it was) and the worst-off flow no lower, and it was not moved within MOVE_HOLD_S (a
  move may reorder a few packets: it has to be worth it); where no chain of up to CHAIN_DEPTH moves
  pays, Hedera's simulated annealing over every movable flow's paths (ANNEAL_STEPS, a seeded RNG)
  proposes a placement, taken on the same terms — on a k=4 fat-tree a random permutation can need a
  chain of five or six moves to free its last shared link;
- a flow whose path crossed a link that failed is re-placed at the re-route, before anything else.

The placement becomes starnet.p4's flow_pin entries: one per switch on the path where the route to
the destination has more than one next hop (a leaf's uplinks, a fat-tree's aggregation layer), and
`pin_updates` writes only what changed. A flow that ends (no INT for FLOW_TIMEOUT_S) loses its pins.
Pure logic and bookkeeping: the caller writes the updates.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller import entities as ent
from controller.routing import NextHop, Route
from topologies.addressing import AddressPlan
from topologies.spec import LinkId, Topology, egress_link, nic_link
from wire.p4info import P4Schema
from wire.proto import p4r

FLOW_PIN = "StarIngress.flow_pin"
FlowKey = tuple[str, str, int, int, int]  # src ip, dst ip, IP protocol, src port, dst port
IMPROVE_INTERVAL_S = 0.1
MOVE_GAIN = 0.10  # a move must raise the product of the flows' fair rates by this share
MOVE_HOLD_S = 0.5  # a flow moved is left alone this long
CHAIN_DEPTH = 3  # flows moved together at most
SEARCH_EVALS = 300  # placements tried per IMPROVE_INTERVAL_S (each a water-filling: ~0.1 ms for 16 flows)
ANNEAL_STEPS = 5000  # simulated annealing steps when no chain pays (each ~8 µs: a few links' loads)
ANNEAL_T0, ANNEAL_T1 = 2.0, 0.01  # its temperature, first and last (energy: capacity asked beyond a link's, in links)
ANNEAL_TRIES = 3  # annealings (each a new random walk) before a situation counts as fruitless
ANNEAL_INTERVAL_S = 0.5  # at most one annealing this often (≤ 40 ms each: ≤ 8% of a core)
EPS = 1e-9


@dataclass(frozen=True)
class Path:
    """One shortest path of a flow: the links it sends into (its NIC, then each switch's egress port,
    the last into the destination host) and the (switch, next hop) choices where its route forks."""

    links: tuple[LinkId, ...]
    forks: tuple[tuple[str, NextHop], ...]


def max_min_rates(paths: Mapping[FlowKey, tuple[LinkId, ...]],
                  capacity: Mapping[LinkId, float]) -> dict[FlowKey, float]:
    """Max-min fair rates (progressive filling: every unfrozen flow rises equally until a link is
    full; its flows freeze). Links missing from `capacity` do not limit."""
    rates = dict.fromkeys(paths, 0.0)
    left = {link: capacity[link] for p in paths.values() for link in p if link in capacity}
    active = {f for f, p in paths.items() if any(link in left for link in p)}
    while active:
        counts = Counter(link for f in active for link in paths[f] if link in left)
        step = min(left[link] / n for link, n in counts.items())
        for f in active:
            rates[f] += step
        full = set()
        for link, n in counts.items():
            left[link] -= step * n
            if left[link] <= EPS * max(1.0, capacity[link]):
                full.add(link)
        active = {f for f in active if not full.intersection(paths[f])}
    for f, p in paths.items():
        if not any(link in capacity for link in p):
            rates[f] = float("inf")
    return rates


@dataclass
class PathScheduler:
    topo: Topology
    plan: AddressPlan
    capacity: dict[LinkId, float]
    placed: dict[FlowKey, Path] = field(default_factory=dict)
    moved_at: dict[FlowKey, float] = field(default_factory=dict)
    pinned: dict[str, dict[FlowKey, NextHop]] = field(default_factory=dict)  # switch → what its flow_pin holds
    moves: int = 0  # flows moved off a path they were on (improvements and re-routes)

    def __post_init__(self) -> None:
        self.host_by_ip = {a.ip: name for name, a in self.plan.hosts.items()}
        self.peer: dict[tuple[str, int], str] = {}
        for link in self.topo.links:
            self.peer[(link.a, link.a_port)] = link.b
            self.peer[(link.b, link.b_port)] = link.a
        self.next_hops: dict[str, dict[str, tuple[NextHop, ...]]] = {}
        self._candidates: dict[tuple[str, str], list[Path]] = {}
        self._improved_at = float("-inf")
        self._evals = 0
        self._fruitless: tuple | None = None
        self._tries: tuple[tuple | None, int] = (None, 0)  # the situation annealed in vain, how often
        self._no_chain: tuple | None = None  # the last situation no chain of moves improved
        self._annealed_at = float("-inf")
        self._rng = random.Random(0)

    # ---- routes and candidates ------------------------------------------------------------------
    def set_routes(self, routes: Mapping[str, list[Route]]) -> None:
        """The routes the switches hold now (at start and after every re-route)."""
        self.next_hops = {sw: {r.prefix: r.next_hops for r in rs} for sw, rs in routes.items()}
        self._candidates.clear()

    def candidates(self, src_ip: str, dst_ip: str) -> list[Path]:
        """Every path the routes allow from src's host to dst's, in a fixed order."""
        key = (src_ip, dst_ip)
        if key not in self._candidates:
            src = self.host_by_ip[src_ip]
            start = self.plan.hosts[src].switch
            found: list[Path] = []
            self._walk(start, dst_ip, (nic_link(src),), (), found, set())
            self._candidates[key] = found
        return self._candidates[key]

    def _walk(self, switch: str, dst_ip: str, links: tuple[LinkId, ...], forks: tuple[tuple[str, NextHop], ...],
              found: list[Path], seen: set[str]) -> None:
        hops = self.next_hops.get(switch, {}).get(dst_ip, ())
        for hop in hops:
            here_links = (*links, egress_link(switch, hop.port))
            here_forks = (*forks, (switch, hop)) if len(hops) > 1 else forks
            peer = self.peer.get((switch, hop.port))
            if peer is None:
                continue
            if self.topo.is_host(peer):
                found.append(Path(here_links, here_forks))
            elif peer not in seen:
                self._walk(peer, dst_ip, here_links, here_forks, found, seen | {switch})

    # ---- placement ------------------------------------------------------------------------------
    def schedule(self, flows: Iterable[FlowKey], now: float,
                 observed: Mapping[FlowKey, tuple[LinkId, ...]] | None = None) -> dict[FlowKey, Path]:
        """Place `flows` (the active ones: the rest are forgotten); `observed`: the links INT saw a
        flow take (ECMP's choice, before any pin). Returns the placement."""
        observed = observed or {}
        flows = [f for f in flows if f[0] in self.host_by_ip and f[1] in self.host_by_ip]
        wanted = set(flows)
        for gone in [f for f in self.placed if f not in wanted]:
            del self.placed[gone]
            self.moved_at.pop(gone, None)
        for f, path in list(self.placed.items()):
            same = [c for c in self.candidates(f[0], f[1]) if c.links == path.links]
            if same:
                self.placed[f] = same[0]  # the same links (its forks may differ after a re-route)
            else:
                del self.placed[f]  # its path is gone (a link failed): placed again below, as new
                self.moves += 1
        for f in sorted(f for f in flows if f not in self.placed):
            self._place_new(f, observed.get(f))
        if now - self._improved_at >= IMPROVE_INTERVAL_S:
            self._improved_at = now
            self._improve(now)
        return dict(self.placed)

    def _loads(self) -> Counter:
        return Counter(link for p in self.placed.values() for link in p.links)

    def _place_new(self, flow: FlowKey, seen: tuple[LinkId, ...] | None) -> None:
        options = self.candidates(flow[0], flow[1])
        if not options:
            return
        loads = self._loads()

        def score(i: int) -> tuple[float, bool, int, int]:
            links = options[i].links
            share = min(self.capacity.get(link, float("inf")) / (loads[link] + 1) for link in links)
            return share, links == seen, -sum(loads[link] for link in links), -i

        self.placed[flow] = options[max(range(len(options)), key=score)]

    def _improve(self, now: float) -> None:
        """While a change pays (the module docstring), make it: a flow on a shared link moved, or
        where no single move pays, a chain (the flow moved, then one whose path the first now
        shares moved too, up to CHAIN_DEPTH flows); at most SEARCH_EVALS placements tried per round.
        Where no chain pays, the annealing's placement (at most every ANNEAL_INTERVAL_S), on the same
        terms. Flows moved within MOVE_HOLD_S stay. Chains are searched once per situation (the
        placement and the flows that may move); a situation annealed ANNEAL_TRIES times in vain is
        not searched again until it changes."""
        self._evals = 0
        for _ in range(len(self.placed)):
            rates = self._rates(self.placed)
            if not rates:
                return
            crowded = {link for link, n in self._loads().items() if n > 1}
            movable = [f for f, p in sorted(self.placed.items())
                       if self._may_move(f, now) and crowded.intersection(p.links)]
            situation = (frozenset(self.placed.items()),
                         tuple(f for f in sorted(self.placed) if self._may_move(f, now)))
            if not movable or situation == self._fruitless:
                return
            worst, score = min(rates.values()), _log_product(rates)
            best = self._search(movable, worst, score, now) if situation != self._no_chain else None
            if best is None:
                self._no_chain = situation
                if now - self._annealed_at < ANNEAL_INTERVAL_S:
                    return
                self._annealed_at = now
                annealed = self._anneal([f for f in sorted(self.placed) if self._may_move(f, now)])
                best = self._better(annealed, worst, score, None) if annealed else None
            if best is None:
                tries = self._tries[1] + 1 if self._tries[0] == situation else 1
                self._tries = (situation, tries)
                if tries >= ANNEAL_TRIES:
                    self._fruitless = situation
                return
            for flow, option in best[1].items():
                self.placed[flow] = option
                self.moved_at[flow] = now
                self.moves += 1

    def _may_move(self, flow: FlowKey, now: float) -> bool:
        return now - self.moved_at.get(flow, float("-inf")) >= MOVE_HOLD_S

    def _search(self, movable: list[FlowKey], worst: float, score: float,
                now: float) -> tuple[float, dict[FlowKey, Path]] | None:
        frontier = [{f: o} for f in movable for o in self.candidates(f[0], f[1]) if o != self.placed[f]]
        for depth in range(1, CHAIN_DEPTH + 1):
            best: tuple[float, dict[FlowKey, Path]] | None = None
            deeper: list[dict[FlowKey, Path]] = []
            for moves in frontier:
                self._evals += 1
                if self._evals > SEARCH_EVALS:
                    return best
                best = self._better(moves, worst, score, best)
                if depth == CHAIN_DEPTH:
                    continue
                taken = set(list(moves.values())[-1].links)
                for other, path in sorted(self.placed.items()):
                    if other in moves or not self._may_move(other, now) or not taken.intersection(path.links):
                        continue
                    deeper += [{**moves, other: o} for o in self.candidates(other[0], other[1]) if o != path]
            if best is not None:
                return best
            frontier = deeper
        return None

    def _anneal(self, movable: list[FlowKey]) -> dict[FlowKey, Path] | None:
        """Hedera's simulated annealing (NSDI'10 §4.3), its steps aimed as WalkSAT aims them: the
        moves to the coolest placement found, or None if none is cooler than the present one.
        Energy: the capacity the links are asked for beyond theirs (each flow asking its NIC's rate),
        in units of the links' capacity; a step puts a movable flow of an overfull link (picked at
        random) on another of its paths, kept if the energy falls or, at temperature T, with
        probability exp(-rise / T)."""
        options = {f: self.candidates(f[0], f[1]) for f in movable}
        flows = {f for f, o in options.items() if len(o) > 1}
        if not flows:
            return None
        demand = {f: self.capacity.get(p.links[0], 0.0) for f, p in self.placed.items()}
        asked: dict[LinkId, float] = defaultdict(float)
        users: dict[LinkId, set[FlowKey]] = {}
        for f, p in self.placed.items():
            for link in p.links:
                asked[link] += demand[f]
                if f in flows:
                    users.setdefault(link, set()).add(f)

        def excess(links: Iterable[LinkId]) -> float:
            return sum(max(0.0, asked[link] - cap) / cap for link in links
                       if (cap := self.capacity.get(link, 0.0)) > 0)

        def overfull(links: Iterable[LinkId]) -> set[LinkId]:  # ... with a flow that may move
            return {link for link in links if users.get(link) and excess((link,)) > 0}

        over = overfull(list(users))
        state = {f: self.placed[f] for f in flows}
        energy = start = excess(list(asked))
        best_energy, best = energy, dict(state)
        temperature, cooling = ANNEAL_T0, (ANNEAL_T1 / ANNEAL_T0) ** (1 / ANNEAL_STEPS)
        for _ in range(ANNEAL_STEPS):
            if not over:
                break
            temperature *= cooling
            flow = self._rng.choice(sorted(users[self._rng.choice(sorted(over))]))
            old = state[flow]
            new = self._rng.choice([o for o in options[flow] if o != old])
            touched = set(old.links) ^ set(new.links)
            before = excess(touched)
            self._shift(asked, users, flow, old.links, new.links, demand[flow])
            rise = excess(touched) - before
            if rise <= 0 or self._rng.random() < math.exp(-rise / temperature):
                state[flow], energy = new, energy + rise
                over.difference_update(touched)
                over.update(overfull(touched))
                if energy < best_energy - EPS:
                    best_energy, best = energy, dict(state)
            else:
                self._shift(asked, users, flow, new.links, old.links, demand[flow])
        if best_energy >= start - EPS:
            return None
        return {f: p for f, p in best.items() if p != self.placed[f]}

    @staticmethod
    def _shift(asked: dict[LinkId, float], users: dict[LinkId, set[FlowKey]], flow: FlowKey, off: tuple[LinkId, ...],
               on: tuple[LinkId, ...], rate: float) -> None:
        for link in off:
            asked[link] -= rate
            users[link].discard(flow)
        for link in on:
            asked[link] += rate
            users.setdefault(link, set()).add(flow)

    def _better(self, moves: dict[FlowKey, Path], worst: float, score: float,
                best: tuple[float, dict[FlowKey, Path]] | None) -> tuple[float, dict[FlowKey, Path]] | None:
        """`best`, or `moves` if they pay and beat it."""
        trial = self._rates({**self.placed, **moves})
        gained = _log_product(trial)
        if gained > score + math.log1p(MOVE_GAIN) and min(trial.values()) >= worst * (1 - EPS) \
                and (best is None or gained > best[0]):
            return gained, moves
        return best

    def _rates(self, placement: Mapping[FlowKey, Path]) -> dict[FlowKey, float]:
        return max_min_rates({f: p.links for f, p in placement.items()}, self.capacity)

    def links_of(self, src_ip: str, dst_ip: str) -> tuple[LinkId, ...] | None:
        """The links of the paths the pair's placed flows take (None: none placed)."""
        links = [link for f, p in self.placed.items() if f[0] == src_ip and f[1] == dst_ip for link in p.links]
        return tuple(dict.fromkeys(links)) if links else None

    # ---- pins -----------------------------------------------------------------------------------
    def wanted_pins(self) -> dict[str, dict[FlowKey, NextHop]]:
        wanted: dict[str, dict[FlowKey, NextHop]] = {}
        for flow, path in self.placed.items():
            for switch, hop in path.forks:
                wanted.setdefault(switch, {})[flow] = hop
        return wanted

    def pin_updates(self, schema_of: Callable[[str], P4Schema], clear: bool = False) -> dict[str, list[p4r.Update]]:
        """Per switch, the flow_pin writes that take it from what it holds to the placement (to no
        pins at all with `clear`): deletes first (room for the inserts), then modifies and inserts.
        What is returned counts as written."""
        wanted = {} if clear else self.wanted_pins()
        out: dict[str, list[p4r.Update]] = {}
        for switch in sorted(set(wanted) | set(self.pinned)):
            have, want = self.pinned.get(switch, {}), wanted.get(switch, {})
            schema = schema_of(switch)
            updates = [ent.delete(pin_entry(schema, f, have[f])) for f in sorted(have) if f not in want]
            for f in sorted(want):
                if f not in have:
                    updates.append(ent.insert(pin_entry(schema, f, want[f])))
                elif have[f] != want[f]:
                    updates.append(ent.modify(pin_entry(schema, f, want[f])))
            if updates:
                out[switch] = updates
            if want:
                self.pinned[switch] = dict(want)
            else:
                self.pinned.pop(switch, None)
        return out

    def restore(self, schema: P4Schema, switch: str) -> list[p4r.Update]:
        """A switch programmed afresh (it reconnected) gets its pins back."""
        return [ent.insert(pin_entry(schema, f, hop)) for f, hop in sorted(self.pinned.get(switch, {}).items())]

    def clear(self) -> None:
        """Forget every flow (mode paths left: pin_updates(clear=True) has taken the pins away)."""
        self.placed.clear()
        self.moved_at.clear()


PATHS_HEADER = "time,switch,op,src,dst,proto,sport,dport,port\n"
_OPS = {p4r.Update.INSERT: "pin", p4r.Update.MODIFY: "move", p4r.Update.DELETE: "unpin"}


def pin_row(wall: float, switch: str, schema: P4Schema, update: p4r.Update) -> str:
    """One paths.csv row: a flow_pin update as written (port: where it now sends; empty: unpinned)."""
    entry = update.entity.table_entry
    fields = {schema.table(FLOW_PIN).match_fields[m.field_id - 1].name: int.from_bytes(m.exact.value, "big")
              for m in entry.match}
    src, dst = (".".join(str(b) for b in fields[k].to_bytes(4, "big")) for k in ("hdr.ipv4.src_addr",
                                                                             "hdr.ipv4.dst_addr"))
    port = int.from_bytes(entry.action.action.params[0].value, "big") if update.type != p4r.Update.DELETE else ""
    return (f"{wall:.6f},{switch},{_OPS.get(update.type, '?')},{src},{dst},{fields['hdr.ipv4.protocol']},"
            f"{fields['meta.l4_src_port']},{fields['meta.l4_dst_port']},{port}\n")


def _log_product(rates: Mapping[FlowKey, float]) -> float:
    return sum(math.log(max(rate, EPS)) for rate in rates.values() if rate != float("inf"))


def pin_entry(schema: P4Schema, flow: FlowKey, hop: NextHop) -> p4r.TableEntry:
    src, dst, proto, sport, dport = flow
    return ent.table_entry(schema, FLOW_PIN, {"hdr.ipv4.dst_addr": dst, "hdr.ipv4.src_addr": src,
                                              "hdr.ipv4.protocol": proto, "meta.l4_src_port": sport,
                                              "meta.l4_dst_port": dport},
                           action_call=ent.action(schema, "StarIngress.set_nhop", port=hop.port, smac=hop.smac,
                                                  dmac=hop.dmac))
