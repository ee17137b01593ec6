"""An asyncio P4Runtime session with one switch: primary arbitration, pipeline push, batched
writes, reads, the PacketIn stream (bounded queue) and PacketOut, with every request logged."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from wire.p4info import P4Schema, decode_value, encode_value
from wire.proto import CLIENT_CHANNEL_OPTIONS, p4r, p4r_grpc, rpc_code, rpc_status

if TYPE_CHECKING:
    from finsy.proto.p4.v1.p4runtime_pb2_grpc import P4RuntimeAsyncStub

log = logging.getLogger("controller.p4rt")

WRITE_BATCH = 256
PACKET_IN_QUEUE = 10000


_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


class SwitchError(RuntimeError):
    pass


def update_errors(exc: grpc.RpcError) -> list[p4r.Error]:
    """The per-update p4.v1.Error list a failed Write carries in its status details (spec, "Write
    RPC"); empty when the server sent none."""
    trailers = cast("tuple[tuple[str, bytes], ...]", exc.trailing_metadata() or ())  # (key, value) pairs
    for key, value in trailers:
        if key == "grpc-status-details-bin":
            status = rpc_status.Status.FromString(value)
            errors = []
            for detail in status.details:
                error = p4r.Error()
                if detail.Unpack(error):
                    errors.append(error)
            return errors
    return []


def failed_updates(exc: grpc.RpcError, updates: Sequence[p4r.Update], offset: int = 0) -> str:
    """'; update 12 (INSERT table_entry): INVALID_ARGUMENT: ...' for the first failing update of a
    batch (its index in the whole write), and how many failed; '' when the server gave no details."""
    errors = update_errors(exc)
    failed = [(i, e) for i, e in enumerate(errors) if e.canonical_code != 0]
    if not failed:
        return ""
    index, error = failed[0]
    update = updates[index] if index < len(updates) else None
    what = (f"{p4r.Update.Type.Name(update.type)} {update.entity.WhichOneof('entity')}" if update is not None
            else "?")
    code = _CODE_NAMES.get(error.canonical_code, str(error.canonical_code))
    return (f"; update {offset + index} ({what}): {code}: {error.message}"
            f" ({len(failed)} of {len(updates)} in the batch failed)")


class SwitchSession:
    def __init__(self, name: str, address: str, device_id: int, schema: P4Schema,
                 election_id: int = 10, request_log: Path | None = None, reclaim: bool = True) -> None:
        """reclaim: when the switch says nobody is primary and the highest election id it has seen
        is above ours (someone took over, then left), arbitrate again with that id + 1."""
        self.name = name
        self.reclaim = reclaim
        self.address = address
        self.device_id = device_id
        self.schema = schema
        self.election_id = election_id
        self.request_log = request_log.open("a") if request_log else None
        self.packet_ins: asyncio.Queue[p4r.PacketIn] = asyncio.Queue(PACKET_IN_QUEUE)
        self.packet_in_drops = 0
        self.is_primary = asyncio.Event()
        self._channel: grpc.aio.Channel | None = None
        self._stub: P4RuntimeAsyncStub | None = None
        self._outbox: asyncio.Queue[p4r.StreamMessageRequest | None] = asyncio.Queue()
        self._stream_task: asyncio.Task | None = None

    def _election(self) -> p4r.Uint128:
        return p4r.Uint128(high=self.election_id >> 64, low=self.election_id & ((1 << 64) - 1))

    def _log(self, what: str, message: Message) -> None:
        if self.request_log:
            body = text_format.MessageToString(message, as_one_line=True)
            self.request_log.write(f"{time.time():.6f} {self.name} {what} {body}\n")
            self.request_log.flush()

    async def connect(self, timeout_s: float = 10.0) -> None:
        """Open the channel and the stream, and become primary; SwitchError if that fails in time."""
        self._channel = grpc.aio.insecure_channel(self.address, options=CLIENT_CHANNEL_OPTIONS)
        self._stub = p4r_grpc.P4RuntimeStub(self._channel)  # typed as the async stub on an aio channel
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout_s)
        except TimeoutError:
            raise SwitchError(f"switch {self.name}: no P4Runtime server at {self.address}") from None
        arbitration = p4r.StreamMessageRequest()
        arbitration.arbitration.device_id = self.device_id
        arbitration.arbitration.election_id.CopyFrom(self._election())
        await self._outbox.put(arbitration)
        self._stream_task = asyncio.create_task(self._stream(), name=f"stream-{self.name}")
        try:
            await asyncio.wait_for(self.is_primary.wait(), timeout_s)
        except TimeoutError:
            raise SwitchError(f"switch {self.name}: did not become primary (election id {self.election_id})") from None

    async def _maybe_reclaim(self, arbitration: p4r.MasterArbitrationUpdate) -> None:
        """P4Runtime makes primary only an election id >= the highest the switch has seen: after a
        takeover (make shell ELECTION=0,100) ended, take the switch back with one above it."""
        past = (arbitration.election_id.high << 64) | arbitration.election_id.low
        if not self.reclaim or arbitration.status.code != rpc_code.NOT_FOUND or past < self.election_id:
            return
        self.election_id = past + 1
        log.warning("%s: no primary; arbitrating again with election id %d", self.name, self.election_id)
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = self.device_id
        request.arbitration.election_id.CopyFrom(self._election())
        await self._outbox.put(request)

    async def _requests(self) -> AsyncIterator[p4r.StreamMessageRequest]:
        while True:
            message = await self._outbox.get()
            if message is None:
                return
            yield message

    async def _stream(self) -> None:
        assert self._stub is not None
        call = self._stub.StreamChannel(self._requests())
        try:
            async for response in call:
                kind = response.WhichOneof("update")
                if kind == "arbitration":
                    if response.arbitration.status.code == 0:
                        self.is_primary.set()
                    else:
                        self.is_primary.clear()
                        log.warning("%s: not primary: %s", self.name, response.arbitration.status.message)
                        await self._maybe_reclaim(response.arbitration)
                elif kind == "packet":
                    try:
                        self.packet_ins.put_nowait(response.packet)
                    except asyncio.QueueFull:
                        self.packet_in_drops += 1
                elif kind == "error":
                    log.warning("%s: stream error %s", self.name, response.error.message)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                log.warning("%s: stream closed: %s", self.name, exc.details())
        finally:
            self.is_primary.clear()

    async def set_pipeline(self, device_config: bytes = b"", *, keep_state: bool = False) -> None:
        """Push the P4Info and device config: VERIFY_AND_COMMIT (the tables start empty), or with
        keep_state RECONCILE_AND_COMMIT (the same program, a new device config, the tables kept)."""
        assert self._stub is not None
        actions = p4r.SetForwardingPipelineConfigRequest
        request = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, action=actions.RECONCILE_AND_COMMIT if keep_state else actions.VERIFY_AND_COMMIT)
        request.election_id.CopyFrom(self._election())
        request.config.p4info.CopyFrom(self.schema.p4info)
        request.config.p4_device_config = device_config
        self._log("SetForwardingPipelineConfig", p4r.SetForwardingPipelineConfigRequest(device_id=self.device_id))
        await self._stub.SetForwardingPipelineConfig(request)

    async def write(self, updates: Sequence[p4r.Update]) -> None:
        """Write in batches of WRITE_BATCH; SwitchError naming the switch and the first failure."""
        assert self._stub is not None
        for start in range(0, len(updates), WRITE_BATCH):
            request = p4r.WriteRequest(device_id=self.device_id)
            request.election_id.CopyFrom(self._election())
            request.updates.extend(updates[start:start + WRITE_BATCH])
            self._log("Write", request)
            try:
                await self._stub.Write(request)
            except grpc.aio.AioRpcError as exc:
                raise SwitchError(f"switch {self.name}: write failed: {exc.code().name}: {exc.details()}"
                                  f"{failed_updates(exc, request.updates, start)}") from None

    async def read(self, entities: Sequence[p4r.Entity]) -> list[p4r.Entity]:
        assert self._stub is not None
        request = p4r.ReadRequest(device_id=self.device_id)
        request.entities.extend(entities)
        found: list[p4r.Entity] = []
        async for response in self._stub.Read(request):
            found.extend(response.entities)
        return found

    async def read_counter_cells(self, cells: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(counter name, index) → (packets, bytes) for just these cells, in one Read: a switch answers a
        whole-counter read with every index (512 here), which costs the soft switch's data plane."""
        entities = []
        for name, index in cells:
            entity = p4r.Entity()
            entity.counter_entry.counter_id = self.schema.id_of(name)
            entity.counter_entry.index.index = index
            entities.append(entity)
        names = {self.schema.id_of(name): name for name, _ in cells}
        return {(names[e.counter_entry.counter_id], e.counter_entry.index.index):
                (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count) for e in await self.read(entities)}

    async def read_counter(self, name: str) -> dict[int, tuple[int, int]]:
        """index → (packets, bytes) of an indirect counter."""
        entity = p4r.Entity()
        entity.counter_entry.counter_id = self.schema.id_of(name)
        return {e.counter_entry.index.index: (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count)
                for e in await self.read([entity])}

    async def packet_out(self, payload: bytes, egress_port: int) -> None:
        message = p4r.StreamMessageRequest()
        message.packet.payload = payload
        for f in self.schema.metadata("packet_out").fields:
            value = egress_port if f.name == "egress_port" else 0
            message.packet.metadata.add(metadata_id=f.id, value=encode_value(value, f.bitwidth))
        await self._outbox.put(message)

    def packet_in_fields(self, packet: p4r.PacketIn) -> dict[str, int]:
        fields = {f.id: f for f in self.schema.metadata("packet_in").fields}
        return {fields[m.metadata_id].name: decode_value(m.value, fields[m.metadata_id].bitwidth, "packet_in")
                for m in packet.metadata if m.metadata_id in fields}

    async def close(self) -> None:
        await self._outbox.put(None)
        if self._stream_task:
            self._stream_task.cancel()
            try:
                await self._stream_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._channel:
            await self._channel.close()
        if self.request_log:
            self.request_log.close()
