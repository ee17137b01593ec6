"""All-reduce algorithms as schedules: for one rank, the ordered list of transfers it takes part in.

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
  once (the executor pipelines by dependency): NVLink and the NICs work together. Each NIC sends 2(N-1)/N · S/G, against the
  ring's 2(n-1)/n · S over the slowest edge (N servers, n = N·G ranks).
- hier-serial: hier with each phase waiting for the whole of the one before on this rank — the
  baseline that shows what pipelining NVLink and NET gains (not a candidate for the tuner).
"""

from __future__ import annotations

from dataclasses import dataclass

FLAT = ("ring", "tree", "hd")  # blind to servers
ALGORITHMS = (*FLAT, "rings", "hier", "hier-serial")


CHANNELS = 2  # connections per rank pair where servers hold several ranks (one elsewhere)


def channels_for(local: int) -> int:
    """Connections per rank pair with `local` ranks per server: hier's all-gather over NVLink runs on
    a second one, so that it never waits behind the reduce-scatter of later chunks, nor they behind
    it; rings spreads its channels over both."""
    return CHANNELS if local > 1 else 1


def algorithms_for(local: int) -> tuple[str, ...]:
    """The algorithms worth trying with `local` GPUs per server (rings and hier are the ring at 1)."""
    return (*FLAT, "rings", "hier") if local > 1 else FLAT


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
    n, pos = len(order), order.index(rank)
    segs = split(lo, hi, n)
    nxt, prv = order[(pos + 1) % n], order[(pos - 1) % n]
    ops, step = [], step0
    for s in range(n - 1 if scatter else 0):
        ops.append(Op(step, True, nxt, *segs[(pos - s) % n], phase=phase, serial=serial, channel=channel))
        ops.append(Op(step, False, prv, *segs[(pos - s - 1) % n], reduce=True, phase=phase, serial=serial,
                      channel=channel))
        step += 1
    for s in range(n - 1 if gather else 0):
        ops.append(Op(step, True, nxt, *segs[(pos + 1 - s) % n], phase=phase, serial=serial, channel=channel))
        ops.append(Op(step, False, prv, *segs[(pos - s) % n], phase=phase, serial=serial, channel=channel))
        step += 1
    return ops


def ring(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    return _ring(list(range(n)), rank, 0, count)


def rail_rings(n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    """One ring per GPU index c over a 1/local share of the buffer: through each server's GPUs from
    c, snaking (odd servers backwards), so it leaves every server on one rail and enters the next on
    the same one."""
    servers = n // local
    ops: list[Op] = []
    for c, (lo, hi) in enumerate(split(0, count, local)):
        order = []
        for k in range(servers):
            gpus = [(c + i) % local for i in range(local)]
            order += [k * local + g for g in (reversed(gpus) if k % 2 else gpus)]
        ops += _ring(order, rank, lo, hi, channel=c % channels_for(local))
    # step-major across channels: both ends of a connection list its pieces in the same order, and
    # one channel's pieces do not wait behind another's whole ring (a stable sort: in a step, by ring)
    return sorted(ops, key=lambda op: op.step)


HIER_SLICES = 4  # hier runs its three phases per slice of the buffer, so each phase's stream runs slice by slice


def hierarchical(n: int, rank: int, count: int, local: int = 1, serial: bool = False,
                 slices: int = HIER_SLICES) -> list[Op]:
    """Per slice of the buffer (NCCL's slicing: NET starts after one slice's reduce-scatter, not
    the whole buffer's): reduce-scatter over NVLink, the rail's ring all-reduce of this GPU's share,
    all-gather over NVLink sending each share's rail segments in the order the rail ring finishes
    them (its own first, then as its all-gather brings them)."""
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
        shares = split(lo, hi, local)
        share = shares[(gpu + 1) % local]  # what the reduce-scatter leaves this GPU
        ops += _ring(mine, rank, lo, hi, step0=step0, gather=False)
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


SCHEDULES = {"ring": ring, "tree": tree, "hd": halving_doubling, "rings": rail_rings, "hier": hierarchical,
             "hier-serial": hierarchical_serial}


def schedule(algo: str, n: int, rank: int, count: int, local: int = 1) -> list[Op]:
    """The ops of `rank` in an all-reduce of `count` elements over `n` ranks, `local` of them per
    server (server-major); empty ops dropped."""
    if algo not in SCHEDULES:
        raise ValueError(f"algo: unknown all-reduce algorithm {algo!r} (one of {', '.join(ALGORITHMS)})")
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside a world of {n}")
    if local < 1 or n % local:
        raise ValueError(f"local: {local} GPUs per server do not divide a world of {n}")
    if n == 1:
        return []
    return [op for op in SCHEDULES[algo](n, rank, count, local) if op.count > 0]


def bytes_sent(ops: list[Op], itemsize: int = 4) -> dict[int, int]:
    """Bytes this rank sends to each peer in one all-reduce (what it declares to the controller)."""
    out: dict[int, int] = {}
    for op in ops:
        if op.send:
            out[op.peer] = out.get(op.peer, 0) + op.count * itemsize
    return out
