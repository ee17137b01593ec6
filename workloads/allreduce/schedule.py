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
"""

from __future__ import annotations

from dataclasses import dataclass

ALGORITHMS = ("ring", "tree", "hd")


@dataclass(frozen=True)
class Op:
    """step: the algorithm's step (ops of one step may run at once); send: True to send the
    elements [start, stop) to peer, False to receive them from peer; reduce: a receive adds into
    the buffer (else it overwrites)."""

    step: int
    send: bool
    peer: int
    start: int
    stop: int
    reduce: bool = False

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


def ring(n: int, rank: int, count: int) -> list[Op]:
    segs = split(0, count, n)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    ops = []
    for s in range(n - 1):  # reduce-scatter: rank r ends up owning segment (r + 1) mod n
        ops.append(Op(s, True, nxt, *segs[(rank - s) % n]))
        ops.append(Op(s, False, prv, *segs[(rank - s - 1) % n], reduce=True))
    for s in range(n - 1):  # all-gather
        ops.append(Op(n - 1 + s, True, nxt, *segs[(rank + 1 - s) % n]))
        ops.append(Op(n - 1 + s, False, prv, *segs[(rank - s) % n]))
    return ops


def tree(n: int, rank: int, count: int) -> list[Op]:
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


def halving_doubling(n: int, rank: int, count: int) -> list[Op]:
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


SCHEDULES = {"ring": ring, "tree": tree, "hd": halving_doubling}


def schedule(algo: str, n: int, rank: int, count: int) -> list[Op]:
    """The ops of `rank` in an all-reduce of `count` elements over `n` ranks; empty ops dropped."""
    if algo not in SCHEDULES:
        raise ValueError(f"algo: unknown all-reduce algorithm {algo!r} (one of {', '.join(ALGORITHMS)})")
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is outside a world of {n}")
    if n == 1:
        return []
    return [op for op in SCHEDULES[algo](n, rank, count) if op.count > 0]


def bytes_sent(ops: list[Op], itemsize: int = 4) -> dict[int, int]:
    """Bytes this rank sends to each peer in one all-reduce (what it declares to the controller)."""
    out: dict[int, int] = {}
    for op in ops:
        if op.send:
            out[op.peer] = out.get(op.peer, 0) + op.count * itemsize
    return out
