"""NVLink counters (controller/nvlinks.py): each port's speed from its shaper, what it carried and its
fastest interval over the window from its byte counter."""

from __future__ import annotations

import json
from pathlib import Path

from controller.nvlinks import NvLinkCounters, shaper_speeds
from topologies import leafspine, railopt
from topologies.addressing import nvlink_intf


def write_bytes(sysfs: Path, port: str, value: int) -> None:
    (sysfs / port / "statistics").mkdir(parents=True, exist_ok=True)
    (sysfs / port / "statistics" / "tx_bytes").write_text(f"{value}\n")


def test_speeds_are_the_root_tbf_rates_of_the_nvlink_ports_only() -> None:
    listing = json.dumps([
        {"kind": "tbf", "dev": "srv1-nvl0", "root": True, "options": {"rate": 10_000_000, "burst": 40000}},
        {"kind": "tbf", "dev": "s1-eth1", "root": True, "options": {"rate": 2_500_000}},  # not an NVLink port
        {"kind": "noqueue", "dev": "srv1-nvl1", "root": True, "options": {}},  # no shaper: no speed
        {"kind": "tbf", "dev": "srv1-nvl2", "parent": "1:1", "options": {"rate": 1}},  # not the root qdisc
    ])
    assert shaper_speeds(listing, {"srv1-nvl0", "srv1-nvl1", "srv1-nvl2"}) == {"srv1-nvl0": 80.0}
    assert shaper_speeds("", {"srv1-nvl0"}) == {}


def test_the_peak_is_the_fastest_interval_and_old_samples_leave_the_window(tmp_path: Path) -> None:
    topo = railopt(servers=1, gpus=2, spines=1)
    counters = NvLinkCounters(topo, window_s=1.0, sysfs=tmp_path)
    port = nvlink_intf(topo, "h1")[1]
    counters.speeds = {port: 40.0, nvlink_intf(topo, "h2")[1]: 80.0}
    sent = 0
    for i, mbps in enumerate([0, 40, 80, 20, 0]):  # Mbit/s over each 50 ms step
        sent += int(mbps * 1e6 / 8 * 0.05)
        write_bytes(tmp_path, port, sent)
        counters.sample(i * 0.05)
    r = counters.readings(0.2)["h1"]
    assert (r.speed_mbps, r.nominal_mbps, r.bytes) == (40.0, topo.nvlink_mbps("h1"), sent)
    assert abs(r.peak_mbps - 80) < 0.5
    h2 = counters.readings(0.2)["h2"]  # its bytes unreadable: its speed still counts, with nothing carried
    assert (h2.speed_mbps, h2.bytes, h2.peak_mbps) == (80.0, 0, 0.0)
    counters.sample(5.0)
    counters.sample(5.01)  # too short an interval to make a peak
    assert counters.readings(5.01)["h1"].peak_mbps == 0.0  # the busy seconds left the window
    counters.speeds = {}
    assert counters.readings(5.01) == {}  # no speed read: no reading


def test_a_fabric_without_servers_reads_nothing(tmp_path: Path) -> None:
    counters = NvLinkCounters(leafspine(), sysfs=tmp_path)
    counters.sample(0.0)
    assert counters.ports == {} and counters.readings(0.0) == {}
