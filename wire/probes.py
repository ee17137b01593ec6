"""Link probes: the frame (EtherType 0x88B5) and who sends it.

A probe names the port it left by (origin device id, port) and when (`sent`, the machine's
monotonic clock: the controller's event loop and the switches read the same one). The switch at
the other end of the link punts it (reason PROBE) and the controller learns that this direction
carried it (controller/links.py).

Who sends it depends on the switch, as in real fabrics where BFD runs in the switch's own CPU
rather than in the controller:
- a BMv2 switch gets each probe from the controller as a P4Runtime packet-out;
- a soft switch sends them itself: the controller gives it the period and the ports in its
  P4Runtime device config (`ForwardingPipelineConfig.p4_device_config`, the target-specific part of
  a pipeline config), and its forwarding thread sends them on time. A packet-out crossed the
  controller's gRPC stream, the switch's stream threads and a wake-up of its forwarding thread —
  ~0.4 ms of CPU a probe; a k=4 fat-tree probed every 50 ms spent 0.6 of this machine's 2 cores on
  that alone, with nothing else running.

The soft switch's device config is JSON: {"probes": {"period_ms": 50, "ports": {"1": "mac", ...}}}
(each fabric port with its MAC, the probe's source); empty bytes: no probes from the switch.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from wire.cpu import ETHERTYPE_PROBE

_PROBE = struct.Struct("!6s6sHIHd")  # dst MAC, src MAC, EtherType, origin device id, origin port, sent at
PROBE_BYTES = 60  # padded to Ethernet's minimum frame
BROADCAST = b"\xff" * 6
MAX_PERIOD_MS = 60_000.0


def probe_frame(src_mac: bytes, device_id: int, port: int, sent: float) -> bytes:
    return _PROBE.pack(BROADCAST, src_mac, ETHERTYPE_PROBE, device_id, port, sent).ljust(PROBE_BYTES, b"\0")


def parse_probe(frame: bytes) -> tuple[int, int, float] | None:
    """(origin device id, origin port, send time) of a probe frame; None if it is not a probe."""
    if len(frame) < _PROBE.size:
        return None
    _dst, _src, ethertype, device, port, sent = _PROBE.unpack_from(frame)
    if ethertype != ETHERTYPE_PROBE:
        return None
    return device, port, sent


def mac_bytes(mac: str) -> bytes:
    """b'\\x02...' of '02:00:...'; ValueError if it is not six octets."""
    raw = bytes.fromhex(mac.replace(":", ""))
    if len(raw) != 6:
        raise ValueError(f"{mac!r} is not a MAC address")
    return raw


@dataclass(frozen=True)
class ProbeSchedule:
    """What a switch that sends its own probes sends: out of each port, from its MAC, every period."""

    period_s: float
    ports: dict[int, bytes]  # P4 port -> source MAC


def device_config(period_s: float, macs: dict[int, str]) -> bytes:
    """The soft switch's device config that has it send the probes of `macs`' ports every period_s."""
    return json.dumps({"probes": {"period_ms": period_s * 1000,
                                  "ports": {str(p): m for p, m in sorted(macs.items())}}}).encode()


def read_device_config(raw: bytes) -> ProbeSchedule | None:
    """The probe schedule a soft switch's device config asks for (None: empty, no probes);
    ValueError naming the field that is wrong."""
    if not raw.strip():
        return None
    try:
        config = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"device config: not JSON ({exc})") from None
    if not isinstance(config, dict) or set(config) - {"probes"}:
        raise ValueError("device config: an object with at most the key 'probes'")
    probes = config.get("probes")
    if probes is None:
        return None
    if not isinstance(probes, dict) or set(probes) != {"period_ms", "ports"}:
        raise ValueError("device config: 'probes' takes exactly 'period_ms' and 'ports'")
    period = probes["period_ms"]
    if isinstance(period, bool) or not isinstance(period, int | float) or not 1 <= period <= MAX_PERIOD_MS:
        raise ValueError(f"device config: probes.period_ms must be 1..{MAX_PERIOD_MS:.0f}, not {period!r}")
    ports = probes["ports"]
    if not isinstance(ports, dict):
        raise ValueError("device config: probes.ports must map port numbers to MACs")
    schedule: dict[int, bytes] = {}
    for port, mac in ports.items():
        if not str(port).isdigit() or not 0 < int(port) < 512:
            raise ValueError(f"device config: probes.ports: {port!r} is not a port number")
        try:
            schedule[int(port)] = mac_bytes(mac)
        except (ValueError, AttributeError):
            raise ValueError(f"device config: probes.ports[{port}]: {mac!r} is not a MAC address") from None
    return ProbeSchedule(period / 1000, schedule)
