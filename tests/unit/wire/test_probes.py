"""Link probe frames and the soft switch's device config that has it send them (wire/probes.py)."""

from __future__ import annotations

import pytest

from wire.probes import PROBE_BYTES, ProbeSchedule, device_config, parse_probe, probe_frame, read_device_config


def test_a_probe_frame_carries_its_origin_and_send_time():
    frame = probe_frame(b"\x02\x00\x00\x00\x00\x07", 7, 3, 1234.5)
    assert len(frame) == PROBE_BYTES and frame[:6] == b"\xff" * 6 and frame[6:12] == b"\x02\x00\x00\x00\x00\x07"
    assert parse_probe(frame) == (7, 3, 1234.5)
    assert parse_probe(frame[:20]) is None
    assert parse_probe(frame[:12] + b"\x08\x00" + frame[14:]) is None  # not EtherType 0x88B5


def test_device_config_round_trip():
    raw = device_config(0.05, {4: "02:00:00:00:01:04", 1: "02:00:00:00:01:01"})
    assert read_device_config(raw) == ProbeSchedule(0.05, {1: bytes.fromhex("020000000101"),
                                                           4: bytes.fromhex("020000000104")})
    assert read_device_config(b"") is None and read_device_config(b"{}") is None


@pytest.mark.parametrize(("raw", "names"), [
    (b"[1]", "at most the key 'probes'"),
    (b'{"probes": 1, "other": 2}', "at most the key 'probes'"),
    (b'{"probes": {"period_ms": true, "ports": {}}}', "probes.period_ms"),
    (b'{"probes": {"period_ms": 1e9, "ports": {}}}', "probes.period_ms"),
    (b'{"probes": {"period_ms": 50, "ports": []}}', "probes.ports must map"),
    (b'{"probes": {"period_ms": 50, "ports": {"0": "02:00:00:00:00:01"}}}', "'0' is not a port number"),
    (b'{"probes": {"period_ms": 50, "ports": {"1": 5}}}', "probes.ports[1]"),
    (b'{"probes": {"period_ms": 50, "ports": {"1": "02:00:00:00:00"}}}', "probes.ports[1]"),
    (b"\xff\xfe", "not JSON"),
])
def test_a_wrong_device_config_names_its_field(raw, names):
    with pytest.raises(ValueError, match="device config") as failed:
        read_device_config(raw)
    assert names in str(failed.value)
