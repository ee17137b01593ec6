"""The incast 6→1 of bench/incast_fidelity.py in ns-3: a reference outside the emulator.

    make reference                 # installs ns-3 (PyPI `ns3`, pinned in pyproject.toml) into the venv, runs this
    .venv/bin/python experiments/reference/incast_ns3.py [--modes none,ecn] [--seconds 8] [--omit 3]

The same fabric as the emulator's default (topologies.leafspine(): 2 spines, 2 leaves, 8 hosts,
every switch port 20 Mbit/s with a 64-packet drop-tail queue), the same senders (h1 h2 h3 h4 h6
h7 → h5), six cubic TCP bulk senders started within 10 ms of each other (seeded), 8 s measured
after 3 s. Per switch egress port a queue disc of 64 packets: in `none` a FIFO (tail drop), in
`ecn` RED configured as a step marker — instantaneous queue (QW 1), CE when the packets already
queued at enqueue are ≥ 16 (MinTh 15, MaxTh 16, no gentle region, no hard drop), tail drop at
64 — which is what the soft switch and starnet.p4 do (a quarter of the queue), with ECN on in
every sender's TCP. The device's own queue holds one packet, so the queue disc is the queue.
Host NICs send at 10 Gbit/s (the emulator's veths have no rate; the first switch port is the
first limit); switch ports at 20 Mbit/s. Routing: ns-3's global routing takes one of the two
equal-cost spines for every flow (the emulator hashes each flow onto one; with six flows of
3.3 Mbit/s no uplink is a bottleneck either way). Link delay: --link-delay-us per link (default
50 µs, so the base RTT with serialisation is about the emulator's, see the README).

Linux-like TCP: cubic with HyStart, SACK, timestamps, delayed ACKs every 2 segments, initial
window 10, minimum RTO 200 ms, SYN timeout 1 s, 1448-byte segments, 4 MiB buffers.

Measured over [omit + 0.5 s, omit + seconds − 0.5 s] as the emulator does: the bottleneck queue
(s4's port to h5) at enqueue, p50/p90/p99, twice: as the emulator's telemetry reads it (1 packet
in 8 carries INT; its reading is reported at once when the queue is at or over the ECN threshold,
else at most once per 10 ms per flow: the queue_* rows, what bench/incast_fidelity.py's table
holds) and over every packet (per_packet_queue_*);
drops at the bottleneck (per second, and on every switch port); CE marks; per-flow goodput and
Jain's index. Writes results.json and prints the table into runs/<time>-ns3-incast/.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab.incast import RECEIVER, SENDERS  # noqa: E402
from topologies import leafspine  # noqa: E402
from wire.stats import jain_index, percentile  # noqa: E402

BOTTLENECK_PORT_OF = ("s4", RECEIVER)  # the switch port toward the receiver
ECN_THRESHOLD_PKTS = 16
HOST_RATE = "10Gbps"
SEED = 1

CPP = r"""
#include <map>
#include <vector>
#include "ns3/ipv4-queue-disc-item.h"
namespace starref {
using namespace ns3;
std::vector<uint32_t> queueAtEnqueue;
// The same queue as the emulator's telemetry sees it: 1 packet in 8 carries INT (the controller's
// sampling); its reading is reported at once when the queue is at or over the ECN threshold (the
// hop flags congestion), else at most once per 10 ms per flow.
std::vector<uint32_t> queueReported;
std::map<uint32_t, double> lastReport;
Ptr<UniformRandomVariable> coin;
uint32_t threshold = 16;
// Each sender's congestion window (segments), sampled every 10 ms as lab/tcpstate.py does.
std::vector<Ptr<Application>> senders;
std::vector<uint32_t> cwndNow;
std::vector<std::vector<uint32_t>> cwndSamples;
uint32_t segment = 1448;
std::vector<Ptr<QueueDisc>> ports;         // every switch egress queue disc; ports[0] = the bottleneck
std::vector<Ptr<PacketSink>> sinks;
std::vector<uint64_t> rxAt[2];
std::vector<uint64_t> dropsAt[2];
std::vector<uint64_t> marksAt[2];
double t0 = 0, t1 = 0;

void OnEnqueue(Ptr<const QueueDiscItem> item) {
  double now = Simulator::Now().GetSeconds();
  uint32_t q = ports[0]->GetNPackets() - 1;
  if (now >= t0 && now < t1) queueAtEnqueue.push_back(q);
  if (coin->GetValue() >= 1.0 / 8) return;
  Ptr<const Ipv4QueueDiscItem> ip = DynamicCast<const Ipv4QueueDiscItem>(item);
  uint32_t src = ip ? ip->GetHeader().GetSource().Get() : 0;
  auto last = lastReport.find(src);
  if (q >= threshold || last == lastReport.end() || now - last->second >= 0.010) {
    lastReport[src] = now;
    if (now >= t0 && now < t1) queueReported.push_back(q);
  }
}
void Snapshot(int which) {
  rxAt[which].clear(); dropsAt[which].clear(); marksAt[which].clear();
  for (auto &s : sinks) rxAt[which].push_back(s->GetTotalRx());
  for (auto &q : ports) {
    const QueueDisc::Stats &st = q->GetStats();
    dropsAt[which].push_back(st.nTotalDroppedPackets);
    marksAt[which].push_back(st.nTotalMarkedPackets);
  }
}
void OnCwnd(size_t flow, uint32_t, uint32_t now) { cwndNow[flow] = now / segment; }
void WatchCwnd() {
  cwndNow.assign(senders.size(), 0);
  cwndSamples.assign(senders.size(), {});
  for (size_t i = 0; i < senders.size(); i++) {
    Ptr<Socket> socket = DynamicCast<BulkSendApplication>(senders[i])->GetSocket();
    if (socket) socket->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&OnCwnd, i));
  }
}
void SampleCwnd() {
  for (size_t i = 0; i < senders.size(); i++) cwndSamples[i].push_back(cwndNow[i]);
  if (Simulator::Now().GetSeconds() + 0.010 < t1) Simulator::Schedule(MilliSeconds(10), &SampleCwnd);
}
void Arm(double from, double to) {
  Simulator::Schedule(Seconds(from - 0.1), &WatchCwnd);
  Simulator::Schedule(Seconds(from), &SampleCwnd);
  t0 = from; t1 = to;
  coin = CreateObject<UniformRandomVariable>();
  ports[0]->TraceConnectWithoutContext("Enqueue", MakeCallback(&OnEnqueue));
  Simulator::Schedule(Seconds(from), &Snapshot, 0);
  Simulator::Schedule(Seconds(to), &Snapshot, 1);
}
void Reset() {
  queueAtEnqueue.clear(); queueReported.clear(); lastReport.clear(); ports.clear(); sinks.clear();
  senders.clear(); cwndNow.clear(); cwndSamples.clear();
  for (int i = 0; i < 2; i++) { rxAt[i].clear(); dropsAt[i].clear(); marksAt[i].clear(); }
}
}
"""


def run(mode: str, seconds: float, omit: float, link_delay_us: float, seed: int) -> dict:
    from ns import ns  # ns-3's Python bindings (cppyy); `make reference` installs them

    cppyy = ns.cppyy
    if not hasattr(cppyy.gbl, "starref"):
        cppyy.cppdef(CPP)
    ref = cppyy.gbl.starref
    ref.Reset()
    ns.RngSeedManager.SetSeed(seed)
    ns.RngSeedManager.SetRun(1)
    cfg = ns.Config.SetDefault
    cfg("ns3::TcpL4Protocol::SocketType", ns.StringValue("ns3::TcpCubic"))
    cfg("ns3::TcpSocket::SegmentSize", ns.UintegerValue(1448))
    cfg("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(10))
    cfg("ns3::TcpSocket::DelAckCount", ns.UintegerValue(2))
    cfg("ns3::TcpSocket::SndBufSize", ns.UintegerValue(4 << 20))
    cfg("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(4 << 20))
    cfg("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.MilliSeconds(200)))
    cfg("ns3::TcpSocket::ConnTimeout", ns.TimeValue(ns.Seconds(1)))  # Linux's initial SYN RTO
    cfg("ns3::TcpSocketBase::Sack", ns.BooleanValue(True))
    cfg("ns3::TcpSocketBase::Timestamp", ns.BooleanValue(True))
    cfg("ns3::TcpSocketBase::UseEcn", ns.StringValue("On" if mode == "ecn" else "Off"))
    cfg("ns3::RedQueueDisc::UseEcn", ns.BooleanValue(True))
    cfg("ns3::RedQueueDisc::UseHardDrop", ns.BooleanValue(False))
    cfg("ns3::RedQueueDisc::Gentle", ns.BooleanValue(False))
    cfg("ns3::RedQueueDisc::Wait", ns.BooleanValue(False))
    cfg("ns3::RedQueueDisc::QW", ns.DoubleValue(1.0))
    cfg("ns3::RedQueueDisc::MinTh", ns.DoubleValue(ECN_THRESHOLD_PKTS - 1))
    cfg("ns3::RedQueueDisc::MaxTh", ns.DoubleValue(ECN_THRESHOLD_PKTS))
    cfg("ns3::RedQueueDisc::LInterm", ns.DoubleValue(1.0))

    topo = leafspine()
    nodes = {}
    for name in [h.name for h in topo.hosts] + [s.name for s in topo.switches]:
        nodes[name] = ns.CreateObject[ns.Node]()
    stack = ns.InternetStackHelper()
    for node in nodes.values():
        stack.Install(node)
    p2p = ns.PointToPointHelper()
    p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.MicroSeconds(int(link_delay_us))))
    p2p.SetQueue("ns3::DropTailQueue", "MaxSize", ns.QueueSizeValue(ns.QueueSize("1p")))
    addresses = ns.Ipv4AddressHelper()
    host_ip: dict[str, str] = {}
    switch_ports = []  # (switch, peer, device)
    for i, link in enumerate(topo.links):
        p2p.SetDeviceAttribute("DataRate", ns.StringValue(f"{link.capacity_mbps}Mbps"))
        devices = p2p.Install(nodes[link.a], nodes[link.b])
        qdisc = ns.TrafficControlHelper()
        limit = ns.QueueSizeValue(ns.QueueSize(f"{link.queue_pkts}p"))
        if mode == "ecn":
            qdisc.SetRootQueueDisc("ns3::RedQueueDisc", "MaxSize", limit)
        else:
            qdisc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", limit)
        host_fifo = ns.TrafficControlHelper()
        host_fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", ns.QueueSizeValue(ns.QueueSize("1000p")))
        for index, (node, peer) in enumerate(((link.a, link.b), (link.b, link.a))):
            device = devices.Get(index)
            if topo.is_host(node):
                device.SetAttribute("DataRate", ns.StringValue(HOST_RATE))
                host_fifo.Install(device)
            else:
                qdiscs = qdisc.Install(device)
                switch_ports.append((node, peer, qdiscs.Get(0)))
        addresses.SetBase(ns.Ipv4Address(f"10.{100 + i // 250}.{i % 250}.0"), ns.Ipv4Mask("255.255.255.0"))
        assigned = addresses.Assign(devices)
        for index, node in enumerate((link.a, link.b)):
            if topo.is_host(node):
                host_ip[node] = str(assigned.GetAddress(index))
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()

    bottleneck = next(q for sw, peer, q in switch_ports if (sw, peer) == BOTTLENECK_PORT_OF)
    ref.ports.push_back(bottleneck)
    for sw, peer, q in switch_ports:
        if (sw, peer) != BOTTLENECK_PORT_OF:
            ref.ports.push_back(q)
    rng = random.Random(seed)
    end = omit + seconds
    for i, sender in enumerate(SENDERS):
        port = 5301 + i
        sink = ns.PacketSinkHelper("ns3::TcpSocketFactory",
                                   ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo())
        sink_apps = sink.Install(nodes[RECEIVER])
        sink_apps.Start(ns.Seconds(0))
        ref.sinks.push_back(sink_apps.Get(0).GetObject[ns.PacketSink]())
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory",
                                 ns.InetSocketAddress(ns.Ipv4Address(host_ip[RECEIVER]), port).ConvertTo())
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))
        bulk.SetAttribute("SendSize", ns.UintegerValue(1448))
        apps = bulk.Install(nodes[sender])
        ref.senders.push_back(apps.Get(0))
        apps.Start(ns.Seconds(0.1 + rng.uniform(0, 0.01)))
        apps.Stop(ns.Seconds(end + 0.2))
    t0, t1 = omit + 0.5, end - 0.5
    ref.Arm(t0, t1)
    ns.Simulator.Stop(ns.Seconds(end + 0.3))
    started = time.monotonic()
    ns.Simulator.Run()
    wall = time.monotonic() - started
    queue, reported = list(ref.queueAtEnqueue), list(ref.queueReported)
    span = t1 - t0
    goodput = [(b - a) * 8 / span / 1e6 for a, b in zip(ref.rxAt[0], ref.rxAt[1], strict=True)]
    drops = [b - a for a, b in zip(ref.dropsAt[0], ref.dropsAt[1], strict=True)]
    marks = [b - a for a, b in zip(ref.marksAt[0], ref.marksAt[1], strict=True)]
    cwnd = [sorted(samples)[len(samples) // 2] if len(samples) else 0 for samples in ref.cwndSamples]
    ns.Simulator.Destroy()
    return {"mode": mode, "queue_p50": percentile(reported, 50), "queue_p90": percentile(reported, 90),
            "queue_p99": percentile(reported, 99), "queue_readings": len(reported),
            "per_packet_queue_p50": percentile(queue, 50), "per_packet_queue_p90": percentile(queue, 90),
            "per_packet_queue_p99": percentile(queue, 99), "queue_samples": len(queue),
            "drops_per_s": drops[0] / span, "drops_bottleneck": drops[0], "drops_other_ports": sum(drops[1:]),
            "ce_marks_bottleneck": marks[0], "ce_marks_other_ports": sum(marks[1:]),
            "goodput_mbps": [round(g, 3) for g in goodput], "cwnd_median_segments": cwnd, "jain": jain_index(goodput),
            "measured_s": span, "simulated_in_s": round(wall, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="none,ecn")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--omit", type=float, default=3.0)
    parser.add_argument("--link-delay-us", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=None, help="run directory (default runs/<time>-ns3-incast)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in ("none", "ecn"):
            parser.error(f"--modes: {mode!r}: the reference has none and ecn")
    try:
        import ns  # noqa: F401
    except ImportError:
        print("incast_ns3: ns-3's Python bindings are not installed; `make reference` installs them "
              "(pip install -e '.[reference]')", file=sys.stderr)
        return 2
    out = args.out or ROOT / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-ns3-incast"
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in modes:
        print(f"ns-3: incast 6->1, mode {mode}, {args.omit + args.seconds:g} s simulated ...", flush=True)
        results[mode] = run(mode, args.seconds, args.omit, args.link_delay_us, args.seed)
    print(f"\n{'ns-3 incast 6->1':28}" + "".join(f"{m:>12}" for m in modes))
    for key in ("queue_p50", "queue_p90", "queue_p99", "per_packet_queue_p50", "per_packet_queue_p90",
                "per_packet_queue_p99", "drops_per_s", "drops_other_ports", "ce_marks_bottleneck",
                "jain"):
        print(f"{key:28}" + "".join(f"{results[m][key]:12.3f}" if key == "jain" else f"{results[m][key]:12.1f}"
                                   for m in modes))
    for m in modes:
        print(f"goodput {m:5} (Mbit/s): " + " ".join(f"{g:.2f}" for g in results[m]["goodput_mbps"])
              + "   cwnd median (segments): " + " ".join(str(c) for c in results[m]["cwnd_median_segments"]))
    (out / "results.json").write_text(json.dumps({"tool": "ns-3", "link_delay_us": args.link_delay_us,
                                                  "seed": args.seed, "modes": results}, indent=1))
    print(f"results: {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
