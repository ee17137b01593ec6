"""Cut a fabric link under a ring all-reduce and time the fabric's repair (tests/integration/
test_failover.py and bench/failover.py): fault → detected by the controller → routes written →
advice re-planned, the longest stall of the affected flow (its sender's TCP acks, sampled every
10 ms by lab/tcpstate.py) and, on restore, the return to service after the hold-down.
"""

from __future__ import annotations

import csv
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from emulation.faults import Fault, inject
from emulation.net import Testbed
from emulation.waiting import wait_until
from wire.adviceclient import get_state
from wire.runfiles import LineTail
from workloads.allreduce.job import JobSpec, run_job
from workloads.fabric import FabricView

RING = ["h1", "h2", "h5", "h6"]
FLOWING_BYTES = 256 << 10  # acknowledged to the flow's destination before the cut: its data is flowing


class FailoverError(RuntimeError):
    """The cut was not seen, the job did not finish, or the link did not return."""


def spine_of(tb: Testbed, src: str, dst: str, ports: range | None = None) -> str | None:
    """The spine the collector saw the src → dst data flow cross (from its INT path); with `ports`,
    only a flow with one of its ports in that range (one job's flows, not an earlier job's)."""
    state = get_state(tb.run_dir, include_flows=True)
    for flow in state.flows:
        if flow.src == tb.host(src).IP() and flow.dst == tb.host(dst).IP() and len(flow.hops) == 3 and (
                ports is None or flow.src_port in ports or flow.dst_port in ports):
            return flow.hops[1].switch
    return None


def longest_gap(path: Path, t0: float, t1: float) -> tuple[float, float]:
    """The longest time in [t0, t1] the sender's busiest connection acknowledged no new bytes
    (connections told apart by both ends: a rank's accepted ones share its listening port), and
    the longest time in it without a sample at all (the sampler's blindness bounds what the gap
    can resolve: a gap no longer than it may be the sampler's, not the flow's)."""
    rows: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.setdefault((r["sport"], r["dst"], r["dport"]), []).append((float(r["time"]), int(r["bytes_acked"])))
    busiest = max(rows.values(), key=lambda v: v[-1][1] - v[0][1])
    gap, blind, last_t, last_b, prev_t = 0.0, 0.0, None, None, None
    for t, b in busiest:
        if prev_t is not None and t0 <= t and prev_t <= t1:
            blind = max(blind, t - prev_t)
        prev_t = t
        if last_b is None or b > last_b:
            if last_t is not None and t0 <= t and last_t <= t1:
                gap = max(gap, t - last_t)
            last_t, last_b = t, b
    return gap, blind


def timeline_row(tb: Testbed, link: str, state: str, after: float = 0.0) -> dict | None:
    """The controller's first row for `link` going `state` detected at or after wall time `after`."""
    return next((r for r in tb.links_timeline() if r["link"] == link and r["state"] == state
                 and float(r["detected_wall"]) >= after), None)


def cut_during_ring(tb: Testbed, flow: tuple[str, str], cut_end: str | None, port_base: int, restore: bool = True,
                    when_seen: Callable[[], object] | None = None, quiet: bool = False) -> dict:
    """Run a ring all-reduce h1 h2 h5 h6 (8 MB, 3 iterations); once `flow` shows in INT, cut the
    link between the spine it crosses and `cut_end` (None: the flow's sender's leaf), then (restore)
    bring it back after the job. Returns the timeline figures of the cut (ms from its onset);
    when_seen() runs once the controller has logged the cut and its result is figures["seen"]."""
    spec = JobSpec(hosts=RING, sizes=[8 << 20], algo="ring", iters=3, name="ring-failover",
                   port_base=port_base)
    outcome: list = []

    def work() -> None:
        try:
            outcome.append(run_job(spec, FabricView.of_testbed(tb), progress=None))
        except Exception as exc:  # noqa: BLE001 - handed to the caller below
            outcome.append(exc)

    job = threading.Thread(target=work)
    sender = flow[0]
    tcp_log = tb.run_dir / f"tcp-failover-{sender}-{port_base}.csv"
    netns = f"/proc/{tb.host(sender).pid}/ns/net"
    label = f"sampler-failover-{port_base}"
    sampler = tb.start_sampler(label, [sys.executable, "-m", "lab.tcpstate", "--out", str(tcp_log), "--dports",
                                       f"{port_base}-{port_base + 99}", "--host", f"{sender}={netns}"])
    job.start()
    try:
        cut = _cut(tb, flow, cut_end, range(port_base, port_base + 100), job, restore, when_seen, tcp_log)
    finally:
        job.join(120)
        tb.spawner.stop(label, sampler)
    if not outcome or isinstance(outcome[0], Exception):
        raise FailoverError(f"the all-reduce failed: {outcome[0] if outcome else 'no outcome'}")
    result = outcome[0].results[0]
    down = timeline_row(tb, cut.link, "down", cut.at)
    assert down is not None  # waited for above
    detected = float(down["detected_wall"]) - cut.at
    gap, blind = longest_gap(tcp_log, cut.at - 0.2, cut.at + 1.0)
    figures = {"link": cut.link, "spine": cut.spine, "wrong": result.wrong, "busbw_mbps": result.busbw_gbs * 8e3,
               "carrier_ms": (cut.carrier - cut.at) * 1e3, "detected_ms": detected * 1e3,
               "routes_ms": detected * 1e3 + float(down["routes_written_ms"]),
               "route_updates": int(down["route_updates"]),
               "advice_ms": detected * 1e3 + float(down["advice_decided_ms"] or "nan"),
               "gap_ms": gap * 1e3, "blind_ms": blind * 1e3, "seen": cut.seen,
               "verdict": tb.verdict(cut.at - 1.0, cut.at + 1.0)}
    if cut.restored is not None:
        up = timeline_row(tb, cut.link, "up", cut.restored)
        assert up is not None
        figures["back_ms"] = (float(up["detected_wall"]) - cut.restored) * 1e3
    if not quiet:
        _print_timeline(figures, flow, cut.restored is not None)
    return figures


@dataclass
class _Cut:
    link: str
    spine: str
    at: float  # wall time the cut began
    carrier: float  # wall time the kernel had taken the carrier away by
    seen: object  # when_seen()'s result
    restored: float | None  # wall time the link was brought back (None: left down)


class AckedTo:
    """The most bytes a connection to `dst` has had acknowledged, from a TCP sampler's file as it
    grows (lab/tcpstate.py's columns): each call reads only the lines written since the last one
    (0 before the first complete row)."""

    def __init__(self, tcp_log: Path, dst: str) -> None:
        self.tail = LineTail(tcp_log)
        self.dst = dst
        self.columns: tuple[int, int] | None = None  # dst's and bytes_acked's, from the header
        self.most = 0

    def __call__(self) -> int:
        for fields in self.tail.poll(lambda fields: fields):
            if self.columns is None:
                self.columns = (fields.index("dst"), fields.index("bytes_acked"))
                continue
            dst, acked = self.columns
            try:
                if fields[dst] == self.dst:
                    self.most = max(self.most, int(fields[acked]))
            except (IndexError, ValueError):  # a row of another shape: not one of this flow's samples
                continue
        return self.most


def _cut(tb: Testbed, flow: tuple[str, str], cut_end: str | None, ports: range, job: threading.Thread,
         restore: bool, when_seen: Callable[[], object] | None, tcp_log: Path) -> _Cut:
    """Once the flow shows in INT and carries data, mid-transfer, the link between its spine and
    `cut_end` (or its sender's leaf) cut; waited for the controller to see it, the job to end and
    (restore) the link to return to service."""
    if not wait_until(lambda: spine_of(tb, *flow, ports) is not None, 15.0):
        raise FailoverError(f"the {flow[0]} -> {flow[1]} flow never showed in INT")
    spine = spine_of(tb, *flow, ports)
    assert spine is not None
    leaf = cut_end or tb.topo.neighbours(flow[0])[0][0]
    # INT sees a rank's first handshake bytes; the data can follow a second later on a busy machine,
    # and a cut before it would measure the job's start, not the repair.
    acked = AckedTo(tcp_log, tb.host(flow[1]).IP())
    if not wait_until(lambda: acked() >= FLOWING_BYTES, 15.0):
        raise FailoverError(f"the {flow[0]} -> {flow[1]} flow never carried {FLOWING_BYTES} bytes")
    time.sleep(0.5)  # mid-transfer
    cut = inject(tb, Fault("link_down", (leaf, spine)))
    at = cut.began
    link = "-".join(sorted((leaf, spine)))
    try:
        if not wait_until(lambda: timeline_row(tb, link, "down", at) is not None, 3.0):
            raise FailoverError(f"the controller never saw {link} down")
        seen = when_seen() if when_seen is not None else None
        job.join(120)
        if job.is_alive():
            raise FailoverError("the all-reduce did not finish within 120 s of the cut")
    except BaseException:
        if restore:  # the link back before the error goes up: a fabric left cut fails whatever runs next on it
            inject(tb, Fault("link_up", (leaf, spine)))
        raise
    restored = None
    if restore:
        restored = back = inject(tb, Fault("link_up", (leaf, spine))).began
        if not wait_until(lambda: timeline_row(tb, link, "up", back) is not None, 5.0):
            raise FailoverError(f"{link} never returned to service")
    return _Cut(link, spine, at, cut.in_effect, seen, restored)


def _print_timeline(figures: dict, flow: tuple[str, str], restored: bool) -> None:
    print(f"\n  timeline of {figures['link']} (ring h1 h2 h5 h6, {flow[0]} -> {flow[1]} crossed {figures['spine']}):"
          f"\n  {'fault (link cut)':36} 0.0 ms"
          f"\n  {'carrier gone (port closed by kernel)':36} {figures['carrier_ms']:.1f} ms"
          f"\n  {'detected by the controller':36} {figures['detected_ms']:.1f} ms"
          f"\n  {'routes written (' + str(figures['route_updates']) + ' updates)':36} {figures['routes_ms']:.1f} ms"
          f"\n  {'advice re-planned':36} {figures['advice_ms']:.1f} ms"
          f"\n  {f'longest gap in {flow[0]} -> {flow[1]} (TCP acks)':36} {figures['gap_ms']:.0f} ms"
          f" (the sampler's longest silence {figures['blind_ms']:.0f} ms)"
          + (f"\n  {'restored -> back in service':36} {figures['back_ms']:.0f} ms (hold-down 500 ms)"
             if restored else "")
          + f"\n  all-reduce: {figures['busbw_mbps']:.2f} Mbit/s busbw, {figures['wrong']} wrong"
          + f"\n  {figures['verdict'].line()}")
