"""INT across leaf–spine–leaf on each target: destinations get the bytes that were sent, and the
controller's reports name the path ECMP chose."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from controller.routing import compute_routes
from emulation.net import Testbed
from emulation.switchproc import bmv2_missing
from softswitch.pipeline import ecmp_hash
from tests.integration.helpers import UDP_SENDER, wait_until
from topologies import leafspine
from wire.adviceclient import get_state

pytestmark = [pytest.mark.mininet, pytest.mark.root]

HERE = Path(__file__).resolve().parent
UDP_PORT, TCP_PORT, LOCAL_UDP_PORT, SPORT = 7777, 7778, 7779, 40000
# INT starts on 1 in 8 packets. Soft switches draw from an RNG seeded with their device id, so which
# of the 64 are sampled is the same every run; BMv2's random() is unseeded: P(none) = (7/8)^64 ≈ 2e-4.
DATAGRAMS = 64


@pytest.fixture(scope="module", params=["soft", "bmv2"])
def fabric(request):
    if request.param == "bmv2" and bmv2_missing():
        pytest.skip(f"{' and '.join(bmv2_missing())} not found: BMv2 runs where p4lang's packages are installed")
    with Testbed(leafspine(), dataplane=request.param, name=f"test-int-{request.param}") as tb:
        yield tb


def capture(tb: Testbed, host: str, port: int, count: int, seconds: float) -> Path:
    out = tb.run_dir / f"capture-{host}-{port}.json"
    h = tb.host(host)
    h.cmd(f"{sys.executable} {HERE / 'capture.py'} {h.defaultIntf().name} {port} {count} {seconds} "
          f"> {out} 2>{out}.err &")
    assert wait_until(lambda: (Path(f"{out}.err").exists() and "ready" in Path(f"{out}.err").read_text()), 5.0)
    return out


def captured(path: Path, seconds: float) -> list[bytes]:
    assert wait_until(lambda: path.exists() and path.read_text().strip().endswith("]"), seconds)
    return [bytes.fromhex(f) for f in json.loads(path.read_text())]


def ip_int(ip: str) -> int:
    a, b, c, d = (int(x) for x in ip.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def test_udp_arrives_unchanged_and_reports_follow_the_ecmp_path(fabric):
    h1, h5 = fabric.host("h1"), fabric.host("h5")
    out = capture(fabric, "h5", UDP_PORT, DATAGRAMS, 10)
    h1.cmd(f"{sys.executable} {UDP_SENDER} {h5.IP()} {SPORT} {DATAGRAMS} {UDP_PORT}")
    frames = captured(out, 15)
    assert len(frames) == DATAGRAMS
    for frame in frames:
        packet = Ether(frame)
        assert packet[IP].tos == 0 and packet[IP].len == 20 + 8 + 100 and packet[UDP].len == 108
        assert bytes(packet[UDP].payload) == b"x" * 100
        check = packet[UDP].chksum
        del packet[UDP].chksum
        assert Ether(bytes(packet))[UDP].chksum == check, "UDP checksum no longer valid"
    key = (h1.IP(), h5.IP(), 17, SPORT, UDP_PORT)

    def reported():
        flows = get_state(fabric.run_dir, include_flows=True).flows
        return [f for f in flows if (f.src, f.dst, f.protocol, f.src_port, f.dst_port) == key]

    assert wait_until(lambda: bool(reported()), 10.0), "no INT report for the UDP flow"
    hops = [(h.switch, h.ingress_port, h.egress_port) for h in reported()[0].hops]
    assert [h[0] for h in hops][::2] == ["s3", "s4"] and hops[1][0] in ("s1", "s2")
    assert hops[0][1] == 1 and hops[2][2] == 1  # h1 on s3 port 1, h5 on s4 port 1
    if fabric.dataplane == "soft":  # the soft switch's selector hash is ours to predict
        uplinks = [r for r in compute_routes(fabric.topo, fabric.plan)["s3"] if r.prefix == h5.IP()][0].next_hops
        chosen = uplinks[ecmp_hash((ip_int(h1.IP()), ip_int(h5.IP()), 17, SPORT, UDP_PORT)) % len(uplinks)]
        assert hops[0][2] == chosen.port
    spine = hops[1][0]
    assert hops[0][2] == fabric.topo.find_link("s3", spine).port_of("s3")
    assert hops[1][2] == fabric.topo.find_link(spine, "s4").port_of(spine)


def test_tcp_stream_arrives_byte_for_byte(fabric):
    h1, h5 = fabric.host("h1"), fabric.host("h5")
    sink_out = fabric.run_dir / "tcp-sink.json"
    h5.cmd(f"{sys.executable} {HERE / 'tcp_stream.py'} sink {TCP_PORT} > {sink_out} 2>&1 &")
    assert wait_until(lambda: f":{TCP_PORT}" in h5.cmd(f"ss -ltnH 'sport = :{TCP_PORT}'"), 5.0)
    frames_out = capture(fabric, "h5", TCP_PORT, 200, 8)
    sent = json.loads(h1.cmd(f"{sys.executable} {HERE / 'tcp_stream.py'} source {h5.IP()} {TCP_PORT} 2000000"))
    assert wait_until(lambda: sink_out.read_text().strip().endswith("}"), 10.0)
    received = json.loads(sink_out.read_text())
    assert received == sent
    frames = captured(frames_out, 10)
    assert frames
    for frame in frames:
        packet = Ether(frame)
        assert packet[IP].tos == 0
        check = packet[TCP].chksum
        del packet[TCP].chksum
        assert Ether(bytes(packet))[TCP].chksum == check, "TCP checksum no longer valid"
    # INT rode on the stream (TCP with options: timestamps) and the sink's reports decode: on BMv2
    # the program used to put INT between the TCP header and its options, and every report failed.
    key = (h1.IP(), h5.IP(), 6, TCP_PORT)

    def reported():
        state = get_state(fabric.run_dir, include_flows=True)
        return state, [f for f in state.flows if (f.src, f.dst, f.protocol, f.dst_port) == key]

    assert wait_until(lambda: bool(reported()[1]), 10.0), "no INT report for the TCP stream"
    state, flows = reported()
    assert state.bad_reports == 0, f"{state.bad_reports} INT reports failed to decode"
    assert [h.switch for h in flows[0].hops][::2] == ["s3", "s4"]


def test_flow_within_one_leaf_is_reported_with_its_one_hop(fabric):
    """h6 → h5 never leaves s4: that switch is the flow's INT source and sink at once, and the
    report (one hop, s4 port 2 → port 1) is what lets the advisor see flows that share only the
    receiver's port. BMv2 used to skip it: its report clone is made at ingress, before INT exists."""
    h6, h5 = fabric.host("h6"), fabric.host("h5")
    out = capture(fabric, "h5", LOCAL_UDP_PORT, DATAGRAMS, 10)
    # 1 ms apart: h6 and h5 share s4 only, and 64 small frames at once fill a 64-packet BMv2 queue.
    h6.cmd(f"{sys.executable} {UDP_SENDER} {h5.IP()} {SPORT} {DATAGRAMS} {LOCAL_UDP_PORT} 1")
    frames = captured(out, 15)
    assert len(frames) == DATAGRAMS
    for frame in frames:  # source and sink on one switch: INT added and stripped, bytes as sent
        packet = Ether(frame)
        assert packet[IP].tos == 0 and packet[IP].len == 20 + 8 + 100 and packet[UDP].len == 108
        assert bytes(packet[UDP].payload) == b"x" * 100
    key = (h6.IP(), h5.IP(), 17, SPORT, LOCAL_UDP_PORT)

    def reported():
        state = get_state(fabric.run_dir, include_flows=True)
        return state, [f for f in state.flows if (f.src, f.dst, f.protocol, f.src_port, f.dst_port) == key]

    assert wait_until(lambda: bool(reported()[1]), 10.0), "no INT report for the flow within s4"
    state, flows = reported()
    assert state.bad_reports == 0
    h6_port = fabric.topo.find_link("s4", "h6").port_of("s4")
    assert [(h.switch, h.ingress_port, h.egress_port) for h in flows[0].hops] == [("s4", h6_port, 1)]
