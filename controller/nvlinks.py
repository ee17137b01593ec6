"""NVLink counters for the localiser (controller/localizer.py): each GPU's NVLink port at its bridge's
end, in the root namespace beside the controller, read as NVML/DCGM read a real server's NVLinks:

- its speed, once a tick: the rate its shaper runs at (`tc -j qdisc show`, in a process of its own so
  the event loop never parses netlink). NVML reports each NVLink's state and speed, and a link that
  trained down (fewer lanes, a lower rate) is seen there first; here a degraded NVLink
  (emulation/faults.py, `rate GPU SERVER MBPS`) runs its shaper slower;
- its bytes toward its GPU, every 50 ms (sysfs tx_bytes): how much it carried and its fastest
  interval over the last seconds, what the degradation costs the jobs on it (the evidence's text).

A topology without servers has nothing to read, and costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from pathlib import Path

from controller.localizer import NvLinkReading
from topologies.addressing import nvlink_intf
from topologies.spec import Topology

log = logging.getLogger("controller")

SAMPLE_S = 0.05
MIN_INTERVAL_S = 0.03  # shorter intervals (a late sample, then a prompt one) make no peak: their timing is noise
TC_TIMEOUT_S = 5.0


def shaper_speeds(tc_json: str, ports: set[str]) -> dict[str, float]:
    """Mbit/s of the root TBF on each of `ports`, from `tc -j qdisc show` (TBF's rate in bytes/s)."""
    speeds = {}
    for qdisc in json.loads(tc_json or "[]"):
        dev = qdisc.get("dev")
        rate = (qdisc.get("options") or {}).get("rate")
        if dev in ports and qdisc.get("kind") == "tbf" and qdisc.get("root") and isinstance(rate, (int, float)):
            speeds[dev] = rate * 8 / 1e6
    return speeds


class NvLinkCounters:
    def __init__(self, topo: Topology, window_s: float = 3.0, sysfs: Path = Path("/sys/class/net")) -> None:
        self.ports = {gpu: nvlink_intf(topo, gpu)[1] for server in topo.servers for gpu in server.gpus}
        self.nominal = {gpu: topo.nvlink_mbps(gpu) for gpu in self.ports}
        self.window_s, self.sysfs = window_s, sysfs
        self.bytes: dict[str, deque[tuple[float, int]]] = {gpu: deque() for gpu in self.ports}
        self.speeds: dict[str, float] = {}  # port → Mbit/s, the last read
        self._unread: set[str] = set()  # ports whose counters could not be read (logged once)

    def sample(self, now: float) -> None:
        """Each port's bytes sent toward its GPU, now."""
        for gpu, port in self.ports.items():
            try:
                sent = int((self.sysfs / port / "statistics" / "tx_bytes").read_text())
            except (OSError, ValueError) as exc:
                self._unreadable(port, exc)
                continue
            q = self.bytes[gpu]
            q.append((now, sent))
            while q and q[0][0] < now - self.window_s:
                q.popleft()

    async def read_speeds(self) -> None:
        """Every port's speed from its shaper, now (a port unread keeps no speed: no evidence)."""
        try:
            proc = await asyncio.create_subprocess_exec("tc", "-j", "qdisc", "show", stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), TC_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise
            if proc.returncode:
                raise OSError(err.decode().strip() or f"exit {proc.returncode}")
            self.speeds = shaper_speeds(out.decode(), set(self.ports.values()))
        except (TimeoutError, OSError, ValueError) as exc:
            self._unreadable("(all: tc qdisc show)", exc)
            self.speeds = {}

    def readings(self, now: float) -> dict[str, NvLinkReading]:
        """Each GPU's NVLink port whose speed is known: that speed, what it carried over the window and
        its fastest interval."""
        out = {}
        for gpu, port in self.ports.items():
            if port not in self.speeds:
                continue
            samples = [(t, b) for t, b in self.bytes[gpu] if t >= now - self.window_s]
            rates = [(b1 - b0) * 8 / (t1 - t0) / 1e6 for (t0, b0), (t1, b1) in zip(samples, samples[1:], strict=False)
                     if t1 - t0 >= MIN_INTERVAL_S]
            carried = samples[-1][1] - samples[0][1] if samples else 0
            out[gpu] = NvLinkReading(self.speeds[port], self.nominal[gpu], carried, max(rates, default=0.0))
        return out

    async def run(self, stopping: asyncio.Event) -> None:
        """Sample the bytes every SAMPLE_S until stopping (the speeds are read by the localiser's tick)."""
        while self.ports and not stopping.is_set():
            self.sample(time.monotonic())
            await asyncio.sleep(SAMPLE_S)

    def _unreadable(self, port: str, exc: Exception) -> None:
        if port not in self._unread:
            self._unread.add(port)
            log.warning("localiser: NVLink port %s unread: %s", port, exc)
