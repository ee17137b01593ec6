"""Per-destination pacing on a host NIC, through netlink (pyroute2), not the tc binary.

    root 1:  htb default 1:1                 (classifies; its classes run at line rate)
      1:1    everything without advice
      1:1xx  one class per advised destination (u32 filter on dst IP)
        xx:  tbf at the advised rate         (does the pacing)

HTB only classifies: on this kernel an HTB class shaping a TCP flow to a few Mbit/s releases it
in bursts of 5-15 frames every 15-60 ms (measured; the tc binary configures it the same way),
while TBF spaces the same flow's frames evenly (3.81 ms apart at 3.17 Mbit/s). A rate of 0 (or
`clear`, or a rate at or above the line rate) sets the destination's TBF to line rate with the
default class's queue (UNPACED_QUEUE_FRAMES, the pfifo an unadvised destination has); the class,
filter and TBF stay, so every advice is one qdisc replace (~1 ms through netlink, measured). A paced
destination's TBF holds ~20 ms of data: TCP sees
a full one as local congestion (a qdisc drop of its own segment makes it enter CWR, no
retransmission), so a loss-based sender like cubic keeps ~20 ms queued on its host instead of
filling a deeper queue (with 200 ms, cubic's RTT reached 150 ms and its retransmission timer fired).
The price is the host's buffer: a sender stalled longer than 20 ms (a busy machine's scheduler)
idles its link, where an unpaced one still had its queue to send — so a flow advised its line rate
(alone on its path: controller/advisor.py's eta_alone) is not paced at all: a PyTorch ring all-reduce
lost up to a third of its bandwidth beside other work, paced at 0.99 of its NIC.
"""

from __future__ import annotations

import ipaddress

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

ROOT = 0x10000
DEFAULT_CLASS = 0x10001
FIRST_CLASS = 0x100
ETH_P_IP = 0x0800
UNPACED_QUEUE_FRAMES = 1000  # the default class's pfifo: the interface's txqueuelen (veth: 1000)


class HtbPacer:
    """ifname: the host's fabric interface; line_rate_bps: the rate of the default class."""

    def __init__(self, ifname: str, line_rate_bps: float) -> None:
        self.ipr = IPRoute()
        found = self.ipr.link_lookup(ifname=ifname)
        if not found:
            raise ValueError(f"no interface {ifname!r} in this namespace")
        self.index = found[0]
        self.line_rate_bps = line_rate_bps
        self.classes: dict[str, int] = {}
        self.rates: dict[str, float] = {}
        try:
            self.ipr.tc("del", index=self.index)
        except NetlinkError:
            pass  # no root qdisc yet
        self.ipr.tc("add", "htb", self.index, ROOT, default=DEFAULT_CLASS & 0xFFFF)
        self._class("add-class", DEFAULT_CLASS, line_rate_bps)

    def _class(self, command: str, classid: int, rate_bps: float) -> None:
        rate = f"{max(int(rate_bps), 8000)}bit"
        burst = max(1600, int(rate_bps / 8 * 0.001))
        self.ipr.tc(command, "htb", self.index, classid, parent=ROOT, rate=rate, ceil=rate, burst=burst,
                    cburst=burst, quantum=1514)

    def _tbf(self, command: str, dst: str, rate_bps: float) -> None:
        classid = self.classes[dst]
        burst = max(1600, int(rate_bps / 8 * 0.0005))  # ~0.5 ms, at least one full frame
        limit = max(8 * 1514, min(int(rate_bps / 8 * 0.02), 4 << 20))  # ~20 ms of data, ≥ 8 frames, ≤ 4 MiB
        if rate_bps >= self.line_rate_bps:  # unpaced: the queue an unadvised destination has
            limit = UNPACED_QUEUE_FRAMES * 1514
        self.ipr.tc(command, "tbf", self.index, (classid & 0xFFFF) << 16, parent=classid,
                    rate=f"{max(int(rate_bps), 8000)}bit", burst=burst, limit=limit)

    def set_rate(self, dst: str, rate_bps: float) -> None:
        """Pace traffic to `dst` at rate_bps (bit/s); 0, or the line rate or more = unpaced."""
        if rate_bps >= self.line_rate_bps:
            rate_bps = 0
        if dst not in self.classes:
            classid = ROOT | (FIRST_CLASS + len(self.classes))
            self._class("add-class", classid, self.line_rate_bps)
            key = f"0x{int(ipaddress.IPv4Address(dst)):08x}/0xffffffff+16"
            self.ipr.tc("add-filter", "u32", self.index, parent=ROOT, prio=1, protocol=ETH_P_IP,
                        target=classid, keys=[key])
            self.classes[dst] = classid
        current = self.rates.get(dst, 0)
        if rate_bps > 0 and current != rate_bps:
            self._tbf("replace", dst, rate_bps)
        elif rate_bps <= 0 and current:
            self._tbf("replace", dst, self.line_rate_bps)  # the kernel will not swap a qdisc's kind in place
        self.rates[dst] = rate_bps if rate_bps > 0 else 0

    def clear(self) -> None:
        for dst in list(self.classes):
            self.set_rate(dst, 0)

    def close(self) -> None:
        try:
            self.ipr.tc("del", index=self.index)
        except NetlinkError:
            pass
        self.ipr.close()
