"""P4Runtime gRPC service (p4.v1.P4Runtime) of the soft switch.

Capabilities, Set/GetForwardingPipelineConfig, Write, Read and StreamChannel with primary
election (highest election id is primary; only the primary may write or send packet-outs),
PacketIn and PacketOut. Write errors follow the spec: one p4.v1.Error per update in the status
details; a single-update batch also carries that update's code as the call's status.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from softswitch.errors import P4RuntimeError
from softswitch.runtime_state import RuntimeState
from wire.p4info import P4Schema, decode_value, encode_value
from wire.proto import p4r, p4r_grpc, rpc_code, rpc_status

log = logging.getLogger("softswitch.p4runtime")

API_VERSION = "1.4.0"
STREAM_QUEUE_LEN = 4096


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


# Binary trailing metadata travels base64-encoded, and gRPC clients refuse trailers beyond 8 KiB
# (soft) / 16 KiB (hard) by default: the per-update details are cut to fit well below that.
DETAILS_BUDGET_BYTES = 4096


def _abort_with_details(context: grpc.ServicerContext, code: grpc.StatusCode, message: str,
                        errors: list[p4r.Error]) -> None:
    """P4Runtime spec, "Write RPC": one p4.v1.Error per update, in order, in the google.rpc.Status
    details. A batch whose details would not fit DETAILS_BUDGET_BYTES gets those of its first
    updates only, and the message says how many were left out: the spec's "gRPC Metadata Maximum
    Size" notes that beyond 8 KB a default client receives a bare RESOURCE_EXHAUSTED instead."""
    status = rpc_status.Status(code=code.value[0], message=message)
    for i, error in enumerate(errors):
        status.details.add().Pack(error)
        if status.ByteSize() > DETAILS_BUDGET_BYTES:
            del status.details[-1]
            failed_after = sum(1 for e in errors[i:] if e.canonical_code != rpc_code.OK)
            status.message = (f"{message} (details for the first {i} of {len(errors)} updates; "
                              f"{failed_after} more failed beyond them)")
            break
    context.abort_with_status(
        _Status(code, status.message, (("grpc-status-details-bin", status.SerializeToString()),))
    )


def _election(value: p4r.Uint128) -> int:
    return (value.high << 64) | value.low


@dataclass(eq=False)
class _Client:
    election_id: int | None = None
    outbox: queue.Queue = field(default_factory=lambda: queue.Queue(STREAM_QUEUE_LEN))
    dropped: int = 0
    end_status: tuple[grpc.StatusCode, str] | None = None  # set: the stream ends with this status

    def end(self, code: grpc.StatusCode, message: str) -> None:
        """Terminate this client's stream with a status (after what is already queued)."""
        self.end_status = (code, message)
        self.outbox.put(None)

    def send(self, message: p4r.StreamMessageResponse) -> bool:
        """Queue a message for the stream; False (and counted) if its queue is full."""
        try:
            self.outbox.put_nowait(message)
        except queue.Full:
            self.dropped += 1
            return False
        return True


class Device:
    """What the service needs of a switch: its pipeline state and packet-out/in hooks."""

    def __init__(self, device_id: int, cpu_port: int,
                 on_pipeline: Callable[[P4Schema, RuntimeState], None],
                 packet_out: Callable[[int, bytes], None]) -> None:
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.on_pipeline = on_pipeline
        self.packet_out = packet_out
        self.schema: P4Schema | None = None
        self.state: RuntimeState | None = None
        self.config = p4r.ForwardingPipelineConfig()


DEFAULT_MAX_STREAMS = 16  # open StreamChannels; more are refused with RESOURCE_EXHAUSTED
UNARY_WORKERS = 8  # threads for Write/Read/Capabilities/pipeline calls, never taken by streams
REFUSAL_WORKERS = 8  # headroom so a stream beyond the limit reaches its refusal instead of queueing


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    def __init__(self, device: Device, max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        self.max_streams = max_streams
        self.device = device
        self.lock = threading.Lock()
        self.clients: list[_Client] = []

    # ---- helpers -------------------------------------------------------------------------------
    def _check_device(self, device_id: int, context: grpc.ServicerContext) -> None:
        if device_id != self.device.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown device id {device_id} "
                          f"(this switch is {self.device.device_id})")

    def primary_election_id(self) -> int | None:
        ids = [c.election_id for c in self.clients if c.election_id is not None]
        return max(ids) if ids else None

    def _check_primary(self, election: p4r.Uint128, context: grpc.ServicerContext) -> None:
        primary = self.primary_election_id()
        if primary is None or _election(election) != primary:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"election id {_election(election)} is not the primary's ({primary})")

    def _state(self, context: grpc.ServicerContext) -> RuntimeState:
        if self.device.state is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
        return self.device.state  # type: ignore[return-value]

    # ---- unary RPCs ----------------------------------------------------------------------------
    def Capabilities(self, request, context):
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request, context):
        self._check_device(request.device_id, context)
        self._check_primary(request.election_id, context)
        action = request.action
        if action == p4r.SetForwardingPipelineConfigRequest.UNSPECIFIED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "action is UNSPECIFIED")
        if action == p4r.SetForwardingPipelineConfigRequest.COMMIT:
            if self.device.state is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "COMMIT without a saved config")
            return p4r.SetForwardingPipelineConfigResponse()
        try:
            schema = P4Schema.from_message(request.config.p4info)
            state = RuntimeState(schema)
            if action == p4r.SetForwardingPipelineConfigRequest.VERIFY:
                _verify(schema)
            else:
                self.device.on_pipeline(schema, state)
        except KeyError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the soft switch runs starnet.p4 and this P4Info does not fit it: {exc}")
        if action != p4r.SetForwardingPipelineConfigRequest.VERIFY:
            self.device.schema, self.device.state = schema, state
            self.device.config = p4r.ForwardingPipelineConfig()
            self.device.config.CopyFrom(request.config)
            log.info("pipeline set: %d tables, %d actions", len(schema.tables), len(schema.actions))
        return p4r.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        self._check_device(request.device_id, context)
        config = p4r.ForwardingPipelineConfig()
        kind = request.response_type
        full = self.device.config
        if kind in (p4r.GetForwardingPipelineConfigRequest.ALL,
                    p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE):
            config.p4info.CopyFrom(full.p4info)
        if kind in (p4r.GetForwardingPipelineConfigRequest.ALL,
                    p4r.GetForwardingPipelineConfigRequest.DEVICE_CONFIG_AND_COOKIE):
            config.p4_device_config = full.p4_device_config
        config.cookie.CopyFrom(full.cookie)
        return p4r.GetForwardingPipelineConfigResponse(config=config)

    def Write(self, request, context):
        self._check_device(request.device_id, context)
        self._check_primary(request.election_id, context)
        state = self._state(context)
        if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        errors: list[p4r.Error] = []
        failed: list[P4RuntimeError] = []
        for update in request.updates:
            try:
                state.apply(update)
                errors.append(p4r.Error(canonical_code=rpc_code.OK))
            except P4RuntimeError as exc:
                failed.append(exc)
                errors.append(p4r.Error(canonical_code=exc.code.value[0], message=exc.message))
        if failed:
            log.info("write: %d of %d updates failed, first: %s", len(failed), len(request.updates), failed[0])
            if len(request.updates) == 1:
                _abort_with_details(context, failed[0].code, failed[0].message, errors)
            _abort_with_details(context, grpc.StatusCode.UNKNOWN,
                                f"{len(failed)} of {len(request.updates)} updates failed; first: {failed[0]}",
                                errors)
        return p4r.WriteResponse()

    def Read(self, request, context) -> Iterator[p4r.ReadResponse]:
        self._check_device(request.device_id, context)
        state = self._state(context)
        response = p4r.ReadResponse()
        try:
            for entity in request.entities:
                for found in state.read(entity):
                    response.entities.append(found)
        except P4RuntimeError as exc:
            context.abort(exc.code, exc.message)
        yield response

    # ---- the stream ----------------------------------------------------------------------------
    def StreamChannel(self, request_iterator, context):
        client = _Client()
        with self.lock:
            full = len(self.clients) >= self.max_streams
            if not full:
                self.clients.append(client)
        if full:
            # Each stream holds a server thread; beyond the limit a stream is refused at once, so
            # that unary calls and the streams already open are never starved.
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this switch serves at most {self.max_streams} StreamChannels at once")
        reader = threading.Thread(target=self._read_stream, args=(client, request_iterator, context),
                                  daemon=True, name="p4rt-stream-reader")
        reader.start()
        try:
            while context.is_active():
                try:
                    message = client.outbox.get(timeout=0.5)
                except queue.Empty:
                    continue
                if message is None:
                    break
                yield message
            if client.end_status is not None:
                with self.lock:
                    if client in self.clients:
                        self.clients.remove(client)
                context.abort(*client.end_status)
        finally:
            with self.lock:
                was_primary = client.election_id is not None and client.election_id == self.primary_election_id()
                if client in self.clients:
                    self.clients.remove(client)
            if was_primary:
                self._announce()

    def _read_stream(self, client: _Client, requests, context) -> None:
        try:
            for request in requests:
                which = request.WhichOneof("update")
                if which == "arbitration":
                    self._arbitrate(client, request.arbitration, context)
                elif which == "packet":
                    self._packet_out(client, request.packet)
                else:
                    log.info("stream message %s ignored", which)
        except grpc.RpcError:
            pass
        except Exception:  # a broken stream must not kill the switch
            log.exception("stream reader failed")
        finally:
            client.send(None)  # type: ignore[arg-type]

    def _arbitrate(self, client: _Client, update: p4r.MasterArbitrationUpdate, context) -> None:
        # P4Runtime spec, "Rules for Handling MasterArbitrationUpdate Messages": both errors
        # terminate the stream with their status.
        if update.device_id != self.device.device_id:
            client.end(grpc.StatusCode.NOT_FOUND, f"unknown device id {update.device_id} "
                                                  f"(this switch is {self.device.device_id})")
            return
        election_id = _election(update.election_id)
        with self.lock:
            if any(c is not client and c.election_id == election_id for c in self.clients):
                client.end(grpc.StatusCode.INVALID_ARGUMENT, f"election id {election_id} is used by another client")
                return
            client.election_id = election_id
        self._announce()

    def _announce(self) -> None:
        """Tell every client who the primary is (OK to the primary, ALREADY_EXISTS to backups)."""
        with self.lock:
            primary = self.primary_election_id()
            clients = list(self.clients)
        for c in clients:
            if c.election_id is None:
                continue
            message = p4r.StreamMessageResponse()
            arb = message.arbitration
            arb.device_id = self.device.device_id
            if primary is not None:
                arb.election_id.high, arb.election_id.low = primary >> 64, primary & ((1 << 64) - 1)
            if c.election_id == primary:
                arb.status.code = rpc_code.OK
                arb.status.message = "is primary"
            else:
                arb.status.code = rpc_code.ALREADY_EXISTS
                arb.status.message = "is backup"
            c.send(message)

    def _stream_error(self, client: _Client, code: grpc.StatusCode, message: str) -> None:
        response = p4r.StreamMessageResponse()
        response.error.canonical_code = code.value[0]
        response.error.message = message
        client.send(response)

    def _packet_out(self, client: _Client, packet: p4r.PacketOut) -> None:
        if client.election_id is None or client.election_id != self.primary_election_id():
            self._stream_error(client, grpc.StatusCode.PERMISSION_DENIED, "packet-out from a non-primary client")
            return
        schema = self.device.schema
        if schema is None:
            self._stream_error(client, grpc.StatusCode.FAILED_PRECONDITION, "no pipeline")
            return
        header = schema.metadata("packet_out")
        values = {m.metadata_id: m.value for m in packet.metadata}
        port_field = next(f for f in header.fields if f.name == "egress_port")
        try:
            port = decode_value(values.get(port_field.id, b""), port_field.bitwidth, "packet_out.egress_port")
        except ValueError as exc:
            error = p4r.StreamMessageResponse()
            error.error.canonical_code = rpc_code.INVALID_ARGUMENT
            error.error.message = str(exc)
            error.error.packet_out.packet_out.CopyFrom(packet)
            client.send(error)
            return
        self.device.packet_out(port, packet.payload)

    def send_packet_in(self, payload: bytes, ingress_port: int, reason: int) -> bool:
        """Deliver a packet to the primary client as PacketIn (called by the data plane); False
        when it could not be (no pipeline, no primary client, its stream queue full)."""
        schema = self.device.schema
        if schema is None:
            return False
        primary = self.primary_election_id()
        target = next((c for c in self.clients if c.election_id == primary and primary is not None), None)
        if target is None:
            return False
        message = p4r.StreamMessageResponse()
        message.packet.payload = payload
        for f in schema.metadata("packet_in").fields:
            value = {"ingress_port": ingress_port, "reason": reason}.get(f.name, 0)
            message.packet.metadata.add(metadata_id=f.id, value=encode_value(value, f.bitwidth))
        return target.send(message)


def _verify(schema: P4Schema) -> None:
    from softswitch.pipeline import Pipeline

    Pipeline(RuntimeState(schema))


def serve(service: P4RuntimeService, address: str) -> tuple[grpc.Server, int]:
    """Start the service on `address`; return the server and the bound TCP port (0 for unix:).

    Threads: one per open stream (up to service.max_streams), UNARY_WORKERS more for unary calls,
    and REFUSAL_WORKERS for streams beyond the limit to be told RESOURCE_EXHAUSTED."""
    max_workers = service.max_streams + UNARY_WORKERS + REFUSAL_WORKERS
    host = address.rsplit(":", 1)[0] if not address.startswith("unix:") else ""
    if host.strip("[]") in ("0.0.0.0", "::", ""):
        if not address.startswith("unix:"):
            raise ValueError(f"refusing to bind {address}: use 127.0.0.1:PORT or unix:PATH")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="p4rt"))
    p4r_grpc.add_P4RuntimeServicer_to_server(service, server)
    bound = server.add_insecure_port(address)
    if bound == 0 and not address.startswith("unix:"):
        raise OSError(f"could not bind the P4Runtime server to {address}")
    server.start()
    return server, bound
