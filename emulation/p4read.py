"""Synchronous P4Runtime Reads for the CLI and post-mortems: no stream, no arbitration needed."""

from __future__ import annotations

import grpc

from wire.drops import DROP_COUNTER, by_reason
from wire.p4info import P4Schema
from wire.proto import CLIENT_CHANNEL_OPTIONS, p4r, p4r_grpc

READ_TIMEOUT_S = 3.0


def read(address: str, device_id: int, entity: p4r.Entity, timeout_s: float = READ_TIMEOUT_S) -> list[p4r.Entity]:
    """Every entity matching `entity` (a wildcard where fields are unset); grpc.RpcError on failure."""
    request = p4r.ReadRequest(device_id=device_id, entities=[entity])
    with grpc.insecure_channel(address, options=CLIENT_CHANNEL_OPTIONS) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        return [e for response in stub.Read(request, timeout=timeout_s) for e in response.entities]


def read_counter(address: str, device_id: int, counter_id: int) -> dict[int, tuple[int, int]]:
    """index → (packets, bytes) of every cell of an indirect counter."""
    entity = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=counter_id))
    return {e.counter_entry.index.index: (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count)
            for e in read(address, device_id, entity)}


def drop_reasons(address: str, device_id: int, schema: P4Schema) -> dict[str, tuple[int, int]]:
    """reason → (packets, bytes) from the switch's counter StarIngress.drop_reason."""
    return by_reason(read_counter(address, device_id, schema.id_of(DROP_COUNTER)))
