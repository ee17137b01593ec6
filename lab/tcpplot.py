"""The senders' TCP state beside the bottleneck queue: a summary per sender and a PNG.

Reads what lab/tcpstate.py wrote for each sender of an incast run and the bottleneck port's
INT queue readings (telemetry.csv), over the run's measured span.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from wire.runfiles import read_telemetry

CA_ORDER = ("open", "disorder", "cwr", "recovery", "loss")


@dataclass
class SenderTcp:
    """One sender's data connection over the measured span."""

    sender: str
    cc: str
    samples: int
    cwnd_median: float
    cwnd_max: int
    min_rtt_ms: float
    srtt_median_ms: float
    retrans: int  # segments retransmitted in the span
    delivered: int  # segments delivered in the span
    delivered_ce: int  # of them with CE
    ecn: bool
    ca_share: dict[str, float]  # share of samples per CA state

    def line(self) -> str:
        states = " ".join(f"{k} {100 * v:.0f}%" for k, v in self.ca_share.items() if v)
        ce = f"{100 * self.delivered_ce / self.delivered:.1f}%" if self.delivered else "-"
        return (f"{self.sender:4} {self.cc:6} ecn {'on ' if self.ecn else 'off'} cwnd median {self.cwnd_median:5.1f} "
                f"max {self.cwnd_max:4}  srtt {self.srtt_median_ms:5.1f} ms (min {self.min_rtt_ms:.2f})  "
                f"retrans {self.retrans:5}  CE {ce:>6} of {self.delivered} delivered  [{states}]")


def read_samples(path: Path, t0: float, t1: float, host: str) -> dict[tuple[str, int], list[dict]]:
    """`host`'s rows of its data connection in [t0, t1), by (dst, sport); iperf3's control connection
    (which carries almost nothing) is the one with the fewest bytes acknowledged, and is left out."""
    by_conn: dict[tuple[str, int], list[dict]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["host"] == host and t0 <= float(row["time"]) < t1:
                by_conn.setdefault((row["dst"], int(row["sport"])), []).append(row)
    if len(by_conn) > 1:
        busiest = max(by_conn, key=lambda k: int(by_conn[k][-1]["bytes_acked"]))
        by_conn = {busiest: by_conn[busiest]}
    return by_conn


def summarise(sender: str, path: Path, t0: float, t1: float) -> SenderTcp | None:
    conns = read_samples(path, t0, t1, sender)
    if not conns:
        return None
    rows = next(iter(conns.values()))
    cwnd = [int(r["cwnd"]) for r in rows]
    first, last = rows[0], rows[-1]
    states = [r["ca_state"] for r in rows]
    return SenderTcp(
        sender=sender, cc=last["cc"], samples=len(rows), cwnd_median=statistics.median(cwnd), cwnd_max=max(cwnd),
        min_rtt_ms=float(last["min_rtt_ms"]), srtt_median_ms=statistics.median(float(r["rtt_ms"]) for r in rows),
        retrans=int(last["total_retrans"]) - int(first["total_retrans"]),
        delivered=int(last["delivered"]) - int(first["delivered"]),
        delivered_ce=int(last["delivered_ce"]) - int(first["delivered_ce"]), ecn=last["ecn"] == "1",
        ca_share={s: states.count(s) / len(states) for s in CA_ORDER})


def bottleneck_queue(telemetry: Path, switch: str, port: int, t0: float, t1: float) -> list[tuple[float, int]]:
    return [(r.time, r.queue_pkts) for r in read_telemetry(telemetry, t0, t1) if (r.switch, r.port) == (switch, port)]


def plot(png: Path, title: str, tcp_files: dict[str, Path], queue: list[tuple[float, int]], t0: float, t1: float,
         ecn_threshold: int, queue_limit: int) -> None:
    """cwnd per sender (top), the bottleneck queue with the ECN threshold and the limit (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True, height_ratios=(3, 2))
    for sender, path in sorted(tcp_files.items()):
        for rows in read_samples(path, t0, t1, sender).values():
            top.plot([float(r["time"]) - t0 for r in rows], [int(r["cwnd"]) for r in rows], lw=0.8, label=sender)
    top.set_ylabel("cwnd (segments)")
    top.legend(loc="upper right", ncol=6, fontsize=8)
    top.set_title(title)
    top.grid(alpha=0.3)
    bottom.plot([t - t0 for t, _ in queue], [q for _, q in queue], ".", ms=2, color="black", label="queue (INT)")
    if ecn_threshold:
        bottom.axhline(ecn_threshold, color="tab:orange", lw=1, ls="--", label=f"ECN threshold {ecn_threshold}")
    bottom.axhline(queue_limit, color="tab:red", lw=1, ls=":", label=f"limit {queue_limit}")
    bottom.set_ylabel("bottleneck queue (packets)")
    bottom.set_xlabel("seconds into the measured span")
    bottom.set_ylim(0, queue_limit + 4)
    bottom.legend(loc="upper right", ncol=3, fontsize=8)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
