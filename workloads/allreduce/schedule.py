"""Collective algorithms as schedules: for one rank, the ordered list of transfers it takes part in
(all-reduce below; all-gather, reduce-scatter and all-to-all further down, with their buffers' layout).

A schedule is pure data (no sockets), so every algorithm is checked by the same executor and the
same tests. Offsets and lengths are in elements of the buffer.

- ring: reduce-scatter then all-gather around the ring 0 → 1 → … → n-1 → 0 (2(n-1) steps, each
  rank sends 2(n-1)/n of the buffer: bandwidth-optimal, as in NCCL's ring).
- tree: a binomial tree rooted at rank 0 — reduce up the tree, then broadcast down it (MPI's
  classic reduce + bcast; 2·ceil(log2 n) steps; every transfer is the whole buffer, pipelined by
  chunk so chunk k goes down while chunk k+1 still goes up). Not NCCL's double binary tree.
- hd: recursive halving (reduce-scatter) then recursive doubling (all-gather), Rabenseifner's
  algorithm; partners at distance 1, 2, 4, … so the largest exchanges stay between neighbouring
  ranks (the same leaf, with the default rank order). A world size that is not a power of two
  folds the first 2·(n - 2^k) ranks in pairs first and unfolds them at the end.

Two more for multi-GPU servers, given `local` = G GPUs per server with the ranks server-major
(rank = server·G + the GPU's index, its rail); with G = 1 both are the ring:
- rings: NCCL's multi-channel, rail-aware ring — G channels, each a ring over 1/G of the buffer
  whose order snakes through the servers (forward in one, backward in the next) starting at GPU c
  in channel c, so each ring leaves a server on one rail and enters the next on the same rail:
  every rail carries two channels' crossings, the rest runs over NVLink.
- hier: hierarchical all-reduce — a reduce-scatter ring over NVLink inside each server, a ring
  all-reduce of each GPU's 1/G share with the same GPU of every other server (over its rail), an
  all-gather ring over NVLink — per slice of the buffer (HIER_SLICES, NCCL's slicing), so the
  rail ring starts after one slice's reduce-scatter and the slices flow through the three phases at
  once (the executor pipelines by dependency): NVLink and the NICs work together. Each NIC sends
  2(N-1)/N · S/G, against the ring's 2(n-1)/n · S over the slowest edge (N servers, n = N·G ranks).
- hier-serial: hier with each phase waiting for the whole of the one before on this rank — the
  baseline that shows what pipelining NVLink and NET gains (not a candidate for the tuner).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

FLAT = ("ring", "tree", "hd")  # blind to servers
ALGORITHMS = (*FLAT, "rings", "hier", "hier-serial")


CHANNELS = 2  # connections per rank pair where servers hold several ranks (one elsewhere)
NET_CHANNEL = CHANNELS  # one more between GPUs of a server, through their NICs: TCCL's NVLink+NET split


def channels_for(local: int) -> int:
    """Connections per rank pair with `local` ranks per server: hier's all-gather over NVLink runs on
    a second one, so that it never waits behind the reduce-scatter of later chunks, nor they behind
    it; rings spreads its channels over both."""
    return CHANNELS if local > 1 else 1


def algorithms_for(local: int, collective: str = "allreduce") -> tuple[str, ...]:
    """The algorithms worth trying with `local` GPUs per server (the server-aware ones are the flat
    ones at 1; hier-serial is a baseline, not a candidate)."""
    if collective == "allreduce":
        return (*FLAT, "rings", "hier") if local > 1 else FLAT
    return tuple(a for a in algorithms(collective) if local > 1 or a not in SERVER_AWARE)


@dataclass(frozen=True)
class Op:
    """step: the algorithm's step (ops of one step may run at once); send: True to send the
    elements [start, stop) to peer, False to receive them from peer; reduce: a receive adds into
    the buffer (else it overwrites); phase: the algorithm's phase (hier: NVLink, NET, NVLink);
    serial: the op waits until this rank has done every op of the phase before; channel: which of
    the rank pair's connections carries it (each works through its own pieces in order)."""

    step: int
    send: bool
    peer: int
    start: int
    stop: int
    reduce: bool = False
    phase: int = 0
    serial: bool = False
    channel: int = 0

    @property
    def count(self) -> int:
        return self.stop - self.start


Schedule = Callable[[int, int, int, int], list[Op]]  # (n, rank, count, local) -> the rank's ops


def split(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) in `parts` contiguous pieces whose lengths differ by at most one."""
    size, rest = divmod(stop - start, parts)
    bounds, at = [], start
    for i in range(parts):
        end = at + size + (1 if i < rest else 0)
        bounds.append((at, end))
        at = end
    return bounds


def _ring(order: list[int], rank: int, lo: int, hi: int, step0: int = 0, scatter: bool = True,
          gather: bool = True, phase: int = 0, serial: bool = False, channel: int = 0) -> list[Op]:
    """`rank`'s ops in a ring over the ranks `order` on elements [lo, hi): a reduce-scatter (after it,
    position p owns segment (p + 1) mod n) and an all-gather, their steps numbered from step0."""
    return _ring_over(order, rank, [[seg] for seg in split(lo, hi, len(order))], step0, scatter, gather, 1,
                      phase, serial, channel)


def _ring_over(order: list[int], rank: int, segs: list[list[tuple[int, int]]], step0: int = 0,
               scatter: bool = True, gather: bool = True, own: int = 1, phase: int = 0, serial: bool = False,
               channel: int = 0) -> list[Op]:
    """The ring over `order` with segment q = the element ranges segs[q] (one op per range): a
    reduce-scatter after which position p owns segment (p + own) mod n, and an all-gather from there."""
    n, pos = len(order), order.index(rank)
    nxt, prv = order[(pos + 1) % n], order[(pos - 1) % n]
    ops, step = [], step0

    def move(send: bool, peer: int, seg: int, reduce: bool = False) -> list[Op]:
        return [Op(step, send, peer, a, b, reduce=reduce, phase=phase, serial=serial, channel=channel)
                for a, b in segs[seg % n]]

    for s in range(n - 1 if scatter else 0):
        ops += move(True, nxt, pos + own - 1 - s) + move(False, prv, pos + own - 2 - s, reduce=True)
        step += 1
    for s in range(n - 1 if gather else 0):
        ops += move(True, nxt, pos + own - s) + move(False, prv, pos + own - 1 - s)
        step += 1
    return ops


def ring(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    return _ring(list(range(n)), rank, 0, count)


def _rail_orders(n: int, local: int) -> list[list[int]]:
    """rings' channel orders: channel c goes through each server's GPUs from c, snaking (odd servers
    backwards), so it leaves every server on one rail and enters the next on the same one."""
    orders = []
    for c in range(local):
        gpus = [(c + i) % local for i in range(local)]
        orders.append([k * local + g for k in range(n // local) for g in (reversed(gpus) if k % 2 else gpus)])
    return orders


def rail_rings(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    """One ring per GPU index c (_rail_orders) over a 1/local share of the buffer."""
    ops: list[Op] = []
    for c, (order, (lo, hi)) in enumerate(zip(_rail_orders(n, local), split(0, count, local), strict=True)):
        ops += _ring(order, rank, lo, hi, channel=c % channels_for(local))
    # step-major across channels: both ends of a connection list its pieces in the same order, and
    # one channel's pieces do not wait behind another's whole ring (a stable sort: in a step, by ring)
    return sorted(ops, key=lambda op: op.step)


HIER_SLICES = 4  # hier runs its three phases per slice of the buffer, so each phase's stream runs slice by slice


def weighted_split(start: int, stop: int, weights: Sequence[float]) -> list[tuple[int, int]]:
    """[start, stop) in len(weights) contiguous pieces with lengths in proportion to the weights."""
    total, length = sum(weights), stop - start
    bounds = [start + round(length * sum(weights[:i]) / total) for i in range(len(weights) + 1)]
    return list(zip(bounds, bounds[1:], strict=False))


def hierarchical(n: int, rank: int, count: int, local: int = 1, serial: bool = False,
                 slices: int = HIER_SLICES, rails: Sequence[float] | None = None) -> list[Op]:
    """Per slice of the buffer (NCCL's slicing: NET starts after one slice's reduce-scatter, not
    the whole buffer's): reduce-scatter over NVLink, the rail's ring all-reduce of this GPU's share,
    all-gather over NVLink sending each share's rail segments in the order the rail ring finishes
    them (its own first, then as its all-gather brings them). rails: each rail's rate (GPU index
    order), to size the shares the rails carry in proportion (a degraded rail carries less);
    None: equal shares."""
    server, gpu = divmod(rank, local)
    mine = [server * local + i for i in range(local)]
    rail = [k * local + gpu for k in range(n // local)]
    servers = len(rail)
    per_slice = 2 * (local - 1) + 2 * (servers - 1)
    nxt, prv = mine[(gpu + 1) % local], mine[(gpu - 1) % local]
    gather_channel = channels_for(local) - 1
    finished_first = [(server + 1 - k) % servers for k in range(servers)]  # rail segments by when they are final
    ops: list[Op] = []
    for k, (lo, hi) in enumerate(split(0, count, slices)):
        step0 = k * per_slice
        # share s is left to GPU s-1 by the reduce-scatter, so rail s-1 carries it
        shares = (weighted_split(lo, hi, [rails[(s - 1) % local] for s in range(local)]) if rails
                  else split(lo, hi, local))
        share = shares[(gpu + 1) % local]  # what the reduce-scatter leaves this GPU
        ops += _ring_over(mine, rank, [[sh] for sh in shares], step0=step0, gather=False)
        ops += _ring(rail, rank, *share, step0=step0 + local - 1, phase=1, serial=serial)
        for s in range(local - 1):  # the all-gather ring over NVLink, each share in rail-segment order
            step = step0 + local - 1 + 2 * (servers - 1) + s
            for send, peer, owner in ((True, nxt, (gpu + 1 - s) % local), (False, prv, (gpu - s) % local)):
                pieces = split(*shares[owner], servers)
                ops += [Op(step, send, peer, *pieces[i], phase=2, serial=serial, channel=gather_channel)
                        for i in finished_first]
    return ops


def hierarchical_serial(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    return hierarchical(n, rank, count, local, serial=True)


def tree(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    levels = max(1, (n - 1).bit_length())
    ops = []
    for k in range(levels):  # reduce towards rank 0
        dist = 1 << k
        if rank % (2 * dist) == dist:
            ops.append(Op(k, True, rank - dist, 0, count))
        elif rank % (2 * dist) == 0 and rank + dist < n:
            ops.append(Op(k, False, rank + dist, 0, count, reduce=True))
    for i, k in enumerate(reversed(range(levels))):  # broadcast from rank 0
        dist = 1 << k
        if rank % (2 * dist) == 0 and rank + dist < n:
            ops.append(Op(levels + i, True, rank + dist, 0, count))
        elif rank % (2 * dist) == dist:
            ops.append(Op(levels + i, False, rank - dist, 0, count))
    return ops


def halving_doubling(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    p = 1 << (n.bit_length() - 1)  # the largest power of two <= n
    extra = n - p
    ops: list[Op] = []
    if rank < 2 * extra and rank % 2 == 0:  # folded: hand the buffer over, get the result back
        ops.append(Op(0, True, rank + 1, 0, count))
        ops.append(Op(1 + 2 * (p.bit_length() - 1), False, rank + 1, 0, count))
        return ops
    if rank < 2 * extra:
        ops.append(Op(0, False, rank - 1, 0, count, reduce=True))
    vrank = rank // 2 if rank < 2 * extra else rank - extra

    def real(v: int) -> int:
        return 2 * v + 1 if v < extra else v + extra

    lo, hi = 0, count
    kept = []
    dims = p.bit_length() - 1
    for d in range(dims):  # reduce-scatter by recursive halving, nearest partner first
        mask = 1 << d
        partner = real(vrank ^ mask)
        (a_lo, a_hi), (b_lo, b_hi) = split(lo, hi, 2)
        keep, give = ((a_lo, a_hi), (b_lo, b_hi)) if vrank & mask == 0 else ((b_lo, b_hi), (a_lo, a_hi))
        ops.append(Op(1 + d, True, partner, *give))
        ops.append(Op(1 + d, False, partner, *keep, reduce=True))
        kept.append((lo, hi))
        lo, hi = keep
    for i, d in enumerate(reversed(range(dims))):  # all-gather by recursive doubling, in reverse
        mask = 1 << d
        partner = real(vrank ^ mask)
        whole_lo, whole_hi = kept[d]
        other = (hi, whole_hi) if lo == whole_lo else (whole_lo, lo)
        ops.append(Op(1 + dims + i, True, partner, lo, hi))
        ops.append(Op(1 + dims + i, False, partner, *other))
        lo, hi = whole_lo, whole_hi
    if rank < 2 * extra:
        ops.append(Op(1 + 2 * dims, True, rank - 1, 0, count))
    return ops


# ---- the other collectives -------------------------------------------------------------------
# All-gather and reduce-scatter work on a buffer of `count` elements cut into one segment per rank
# (split(0, count, n)[r] is rank r's): all-gather starts with each rank's own segment and ends with
# all of them; reduce-scatter ends with rank r's segment summed over every rank. All-to-all works
# on a buffer three times `count` long: the input [0, count) in n equal blocks (count // n each),
# block j for rank j; the output [count, 2·count), block i from rank i; [2·count, 3·count) a relay's
# staging (pxn).


def _one_way(n: int, rank: int, count: int, local: int, gather: bool) -> list[Op]:
    segs = split(0, count, n)
    return _ring_over(list(range(n)), rank, [[seg] for seg in segs], scatter=not gather, gather=gather, own=0)


def _one_way_rings(n: int, rank: int, count: int, local: int, gather: bool) -> list[Op]:
    segs = split(0, count, n)
    ops: list[Op] = []
    for c, order in enumerate(_rail_orders(n, local)):
        pieces = [[split(*segs[r], local)[c]] for r in order]  # channel c: its 1/local of every rank's segment
        ops += _ring_over(order, rank, pieces, scatter=not gather, gather=gather, own=0,
                          channel=c % channels_for(local))
    return sorted(ops, key=lambda op: op.step)


def _one_way_hier(n: int, rank: int, count: int, local: int, gather: bool) -> list[Op]:
    """All-gather: over the rail first (each GPU gathers its rail's segments: NIC bytes (N-1)·S/n),
    then over NVLink (every GPU's rail set). Reduce-scatter: the reverse. Each rail set is listed in
    the order the rail phase finishes or needs its segments, so the two phases pipeline."""
    server, gpu = divmod(rank, local)
    servers = n // local
    segs = split(0, count, n)
    mine = [server * local + i for i in range(local)]
    rail = [k * local + gpu for k in range(servers)]
    by_rail = [[segs[r]] for r in rail]
    if gather:  # the rail ring finishes this server's segment first, then server-1, server-2, …
        first = [(server - k) % servers for k in range(servers)]
        sets = [[segs[k * local + q] for k in first] for q in range(local)]
        return (_ring_over(rail, rank, by_rail, scatter=False, own=0)
                + _ring_over(mine, rank, sets, step0=servers - 1, scatter=False, own=0, phase=1))
    needed = [(server - 1 - k) % servers for k in range(servers)]  # the rail ring sends server-1's first
    sets = [[segs[k * local + q] for k in needed] for q in range(local)]
    return (_ring_over(mine, rank, sets, gather=False, own=0)
            + _ring_over(rail, rank, by_rail, step0=local - 1, gather=False, own=0, phase=1))


def alltoall_blocks(n: int, count: int) -> list[tuple[int, int]]:
    """All-to-all's input blocks: n of count // n elements (a remainder stays where it is)."""
    b = count // n
    return [(j * b, (j + 1) * b) for j in range(n)]


def alltoall_pairwise(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    """n-1 steps; in step s every rank sends to rank+s and receives from rank-s (each pair once)."""
    blocks = alltoall_blocks(n, count)
    ops = []
    for s in range(1, n):
        to, frm = (rank + s) % n, (rank - s) % n
        ops.append(Op(s - 1, True, to, *blocks[to]))
        ops.append(Op(s - 1, False, frm, count + blocks[frm][0], count + blocks[frm][1]))
    return ops


def alltoall_pxn(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    """NCCL's PXN: a block for a GPU on another server and another rail goes over NVLink to the GPU of
    this server on the destination's rail, which sends it over its rail (step 1): no block crosses
    rails, so none crosses the spines of a rail-optimized fabric. The rest goes straight (step 0)."""
    if local == 1:
        return alltoall_pairwise(n, rank, count)
    blocks = alltoall_blocks(n, count)
    b = count // n
    servers = n // local
    server, gpu = divmod(rank, local)

    def out(src: int) -> tuple[int, int]:
        return count + blocks[src][0], count + blocks[src][1]

    def staged(src_gpu: int, dst_server: int) -> tuple[int, int]:  # on the relay
        at = 2 * count + (src_gpu * servers + dst_server) * b
        return at, at + b

    moves: list[tuple[int, tuple[int, int], Op]] = []  # (step, (origin, destination), op): both ends sort alike
    for j in range(n):  # this rank's blocks
        if j != rank:
            k, g = divmod(j, local)
            via = j if k == server or g == gpu else server * local + g
            moves.append((0, (rank, j), Op(0, True, via, *blocks[j])))
    for i in range(n):  # straight to this rank
        k, g = divmod(i, local)
        if i != rank and (k == server or g == gpu):
            moves.append((0, (i, rank), Op(0, False, i, *out(i))))
    for g in range(local):  # relayed by this rank: from its server's other GPUs to this rail's other GPUs
        if g == gpu:
            continue
        for k in range(servers):
            if k != server:
                origin, destination = server * local + g, k * local + gpu
                moves.append((0, (origin, destination), Op(0, False, origin, *staged(g, k))))
                moves.append((1, (origin, destination), Op(1, True, destination, *staged(g, k))))
    for k in range(servers):  # relayed to this rank by the GPU of each other server on this rail
        if k == server:
            continue
        for g in range(local):
            if g != gpu:
                origin = k * local + g
                moves.append((1, (origin, rank), Op(1, False, k * local + gpu, *out(origin))))
    return [op for _, _, op in sorted(moves, key=lambda m: (m[0], m[1]))]


SCHEDULES: dict[str, Schedule] = {"ring": ring, "tree": tree, "hd": halving_doubling, "rings": rail_rings,
                                  "hier": hierarchical, "hier-serial": hierarchical_serial}
COLLECTIVES: dict[str, dict[str, Schedule]] = {
    "allreduce": SCHEDULES,
    "allgather": {"ring": partial(_one_way, gather=True), "rings": partial(_one_way_rings, gather=True),
                  "hier": partial(_one_way_hier, gather=True)},
    "reducescatter": {"ring": partial(_one_way, gather=False), "rings": partial(_one_way_rings, gather=False),
                      "hier": partial(_one_way_hier, gather=False)},
    "alltoall": {"pairwise": alltoall_pairwise, "pxn": alltoall_pxn},
}
SERVER_AWARE = ("rings", "hier", "hier-serial", "pxn")  # need the same number of GPUs of each server
# nccl-tests' bus bandwidth: algbw times this, what each rank's link carries whatever the world size
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
              "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}


def algorithms(collective: str) -> tuple[str, ...]:
    if collective not in COLLECTIVES:
        raise ValueError(f"collective: unknown {collective!r} (one of {', '.join(COLLECTIVES)})")
    return tuple(COLLECTIVES[collective])


def buffer_count(collective: str, count: int) -> int:
    """Elements of a rank's working buffer for a collective of `count` (all-to-all: input, output, staging)."""
    return 3 * count if collective == "alltoall" else count


def split_over_net(ops: list[Op], rank: int, local: int, split: float) -> list[Op]:
    """TCCL's NVLink+NET heterogeneous parallel path: of every transfer between GPUs of one server,
    the last `split` of its elements go through the two GPUs' NICs and the fabric (NET_CHANNEL), the
    rest over NVLink. Both ends cut a transfer at the same element, in the same order."""
    if split <= 0 or local == 1:
        return ops
    out = []
    for op in ops:
        if op.peer // local != rank // local:
            out.append(op)
            continue
        at = op.stop - round(op.count * split)
        if at > op.start:
            out.append(replace(op, stop=at))
        if at < op.stop:
            out.append(replace(op, start=at, channel=NET_CHANNEL))
    return out


def schedule(algo: str, n: int, rank: int, count: int, local: int = 1, collective: str = "allreduce",
             split: float = 0.0, rails: Sequence[float] | None = None) -> list[Op]:
    """The ops of `rank` in a collective of `count` elements over `n` ranks, `local` of them per
    server (server-major), `split` of what GPUs of a server exchange sent through their NICs, and
    (hier) the shares sized by the rails' rates; empty ops dropped."""
    if not 0 <= split <= 1:
        raise ValueError(f"split: the share of a server's internal traffic sent through the NICs must be "
                         f"within 0..1, got {split:g}")
    if algo not in algorithms(collective):
        raise ValueError(f"algo: unknown {collective} algorithm {algo!r} (one of {', '.join(algorithms(collective))})")
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside a world of {n}")
    if local < 1 or n % local:
        raise ValueError(f"local: {local} GPUs per server do not divide a world of {n}")
    if n == 1:
        return []
    if rails is not None:
        if collective != "allreduce" or algo not in ("hier", "hier-serial"):
            raise ValueError(f"rails: only the hierarchical all-reduce sizes its shares by rail, not "
                             f"{collective} {algo}")
        if len(rails) != local or min(rails) <= 0:
            raise ValueError(f"rails: give a positive rate for each of the {local} rails, got {list(rails)}")
        ops = hierarchical(n, rank, count, local, serial=algo == "hier-serial", rails=rails)
    else:
        ops = COLLECTIVES[collective][algo](n, rank, count, local)
    return split_over_net([op for op in ops if op.count > 0], rank, local, split)


def bytes_sent(ops: list[Op], itemsize: int = 4) -> dict[int, int]:
    """Bytes this rank sends to each peer in one all-reduce (what it declares to the controller)."""
    out: dict[int, int] = {}
    for op in ops:
        if op.send:
            out[op.peer] = out.get(op.peer, 0) + op.count * itemsize
    return out
