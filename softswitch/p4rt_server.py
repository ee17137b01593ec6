"""P4Runtime gRPC service (p4.v1.P4Runtime) of the soft switch.

Capabilities, Set/GetForwardingPipelineConfig, Write, Read and StreamChannel with primary
election (highest election id is primary; only the primary may write or send packet-outs),
PacketIn and PacketOut. Write errors follow the spec: one p4.v1.Error per update in the status
details; a single-update batch also carries that update's code as the call's status.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc

from softswitch.device import Client, Device, election
from softswitch.errors import DETAILS_BUDGET_BYTES, P4RuntimeError, abort_with_details
from softswitch.runtime_state import RuntimeState
from wire.p4info import P4Schema, decode_value, encode_value
from wire.proto import p4r, p4r_grpc, rpc_code

log = logging.getLogger("softswitch.p4runtime")

API_VERSION = "1.4.0"
READ_CHUNK = 1000  # entities per ReadResponse: big reads stay far below gRPC's 4 MB message limit


DEFAULT_MAX_STREAMS = 16  # open StreamChannels; more are refused with RESOURCE_EXHAUSTED
UNARY_WORKERS = 8  # threads for Write/Read/Capabilities/pipeline calls, never taken by streams
REFUSAL_WORKERS = 8  # headroom so a stream beyond the limit reaches its refusal instead of queueing


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    def __init__(self, device: Device, max_streams: int = DEFAULT_MAX_STREAMS,
                 error_details_bytes: int = DETAILS_BUDGET_BYTES) -> None:
        """error_details_bytes: the size failed updates' details are cut to (0: every one)."""
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        if error_details_bytes < 0:
            raise ValueError(f"error_details_bytes must be >= 0, got {error_details_bytes}")
        self.max_streams = max_streams
        self.error_details_bytes = error_details_bytes
        self.device = device
        self.lock = threading.Lock()
        self.clients: list[Client] = []
        self.primary: Client | None = None
        self.election_past: int | None = None  # highest election id ever seen (spec: election_id_past)

    # ---- helpers -------------------------------------------------------------------------------
    def _check_device(self, device_id: int, context: grpc.ServicerContext) -> None:
        if device_id != self.device.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown device id {device_id} "
                          f"(this switch is {self.device.device_id})")

    def primary_election_id(self) -> int | None:
        primary = self.primary
        return None if primary is None else primary.election_id

    def _check_primary(self, request: p4r.WriteRequest | p4r.SetForwardingPipelineConfigRequest,
                       context: grpc.ServicerContext) -> None:
        primary = self.primary_election_id()
        if not request.HasField("election_id"):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "no election id: only the primary may do this")
        if primary is None or election(request.election_id) != primary:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"election id {election(request.election_id)} is not the primary's ({primary})")

    def _state(self, context: grpc.ServicerContext) -> RuntimeState:
        """The state Read and Write work on: a saved config's, else the running one's."""
        if self.device.saved is not None:
            return self.device.saved[1]
        if self.device.state is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
        return self.device.state

    # ---- unary RPCs ----------------------------------------------------------------------------
    def Capabilities(self, request: p4r.CapabilitiesRequest, context: grpc.ServicerContext) -> p4r.CapabilitiesResponse:
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    def SetForwardingPipelineConfig(self, request: p4r.SetForwardingPipelineConfigRequest,
                                    context: grpc.ServicerContext) -> p4r.SetForwardingPipelineConfigResponse:
        """P4Runtime spec, "SetForwardingPipelineConfig RPC": VERIFY checks; VERIFY_AND_SAVE keeps
        the config for Read/Write while the data plane goes on with the old one, until COMMIT
        realizes it with what was written since; VERIFY_AND_COMMIT realizes it with a cleared
        state; RECONCILE_AND_COMMIT keeps the forwarding state, which this switch can do only
        when the P4Info is the running one (starnet.p4 is its only program)."""
        self._check_device(request.device_id, context)
        self._check_primary(request, context)
        actions = p4r.SetForwardingPipelineConfigRequest
        action = request.action
        if action == actions.UNSPECIFIED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "action is UNSPECIFIED")
        if action == actions.COMMIT:
            if request.HasField("config"):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "COMMIT takes no config (it commits the saved one)")
            if self.device.saved is None:
                context.abort(grpc.StatusCode.NOT_FOUND, "COMMIT without a saved config (VERIFY_AND_SAVE first)")
            self.device.commit(*self.device.saved)
            return p4r.SetForwardingPipelineConfigResponse()
        if not request.HasField("config") or not request.config.HasField("p4info"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"{actions.Action.Name(action)} needs a config with a P4Info")
        try:
            schema = P4Schema.from_message(request.config.p4info)
            _verify(schema)
        except (KeyError, ValueError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the soft switch runs starnet.p4 and this P4Info does not fit it: {exc}")
        try:
            probes = self.device.probe_schedule(request.config.p4_device_config)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if action == actions.VERIFY:
            pass
        elif action == actions.VERIFY_AND_SAVE:
            config = p4r.ForwardingPipelineConfig()
            config.CopyFrom(request.config)
            self.device.saved = (schema, RuntimeState(schema), config)
            log.info("pipeline saved (not committed)")
        elif action == actions.VERIFY_AND_COMMIT:
            self.device.commit(schema, RuntimeState(schema), request.config)
        elif action == actions.RECONCILE_AND_COMMIT:
            if self.device.state is None or self.device.config.p4info.SerializeToString(deterministic=True) != \
                    request.config.p4info.SerializeToString(deterministic=True):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "RECONCILE_AND_COMMIT: the forwarding state can be kept only for the running P4Info")
            self.device.config.CopyFrom(request.config)  # new cookie / device config, same tables
            self.device.saved = None
            self.device.on_probes(probes)
        else:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown action {action}")
        return p4r.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request: p4r.GetForwardingPipelineConfigRequest,
                                    context: grpc.ServicerContext) -> p4r.GetForwardingPipelineConfigResponse:
        self._check_device(request.device_id, context)
        saved = self.device.saved
        if self.device.state is None and saved is None:
            # P4Runtime spec, GetForwardingPipelineConfig: nothing set yet, so no config (not an
            # empty P4Info and a cookie, which clients such as finsy take for a different program).
            return p4r.GetForwardingPipelineConfigResponse()
        config = p4r.ForwardingPipelineConfig()
        kind = request.response_type
        # The config in force; before the first commit, one VERIFY_AND_SAVE saved (Read and Write use it)
        full = self.device.config if self.device.state is not None or saved is None else saved[2]
        if kind in (p4r.GetForwardingPipelineConfigRequest.ALL,
                    p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE):
            config.p4info.CopyFrom(full.p4info)
        if kind in (p4r.GetForwardingPipelineConfigRequest.ALL,
                    p4r.GetForwardingPipelineConfigRequest.DEVICE_CONFIG_AND_COOKIE):
            config.p4_device_config = full.p4_device_config
        config.cookie.CopyFrom(full.cookie)
        return p4r.GetForwardingPipelineConfigResponse(config=config)

    def Write(self, request: p4r.WriteRequest, context: grpc.ServicerContext) -> p4r.WriteResponse:
        self._check_device(request.device_id, context)
        self._check_primary(request, context)
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
            abort_with_details(context, grpc.StatusCode.UNKNOWN,
                                f"{len(failed)} of {len(request.updates)} updates failed; first: {failed[0]}",
                                errors, self.error_details_bytes)
        return p4r.WriteResponse()

    def Read(self, request: p4r.ReadRequest, context: grpc.ServicerContext) -> Iterator[p4r.ReadResponse]:
        """P4Runtime spec, "Read RPC" / "Batch Processing": every entity of the batch is read (an
        empty Entity is INVALID_ARGUMENT); if any failed, the stream ends UNKNOWN with one
        p4.v1.Error per entity in the status details, after the entities the others found."""
        self._check_device(request.device_id, context)
        state = self._state(context)
        response = p4r.ReadResponse()
        errors: list[p4r.Error] = []
        failed: list[str] = []
        with state.lock:
            for entity in request.entities:
                try:
                    if entity.WhichOneof("entity") is None:
                        raise P4RuntimeError(grpc.StatusCode.INVALID_ARGUMENT,
                                             "empty Entity: a wildcard read of everything is not allowed")
                    response.entities.extend(state.read(entity))
                    errors.append(p4r.Error(canonical_code=rpc_code.OK))
                except P4RuntimeError as exc:
                    errors.append(p4r.Error(canonical_code=exc.code.value[0], message=exc.message))
                    failed.append(exc.message)
                except Exception as exc:  # noqa: BLE001 - the spec's "critical error": INTERNAL, the switch goes on
                    log.exception("read of %s failed", entity.WhichOneof("entity"))
                    errors.append(p4r.Error(canonical_code=rpc_code.INTERNAL, message=repr(exc)))
                    failed.append(repr(exc))
        for start in range(0, len(response.entities), READ_CHUNK):
            yield p4r.ReadResponse(entities=response.entities[start:start + READ_CHUNK])
        if failed:
            abort_with_details(context, grpc.StatusCode.UNKNOWN,
                                f"{len(failed)} of {len(request.entities)} reads failed; first: {failed[0]}", errors,
                                self.error_details_bytes)

    # ---- the stream ----------------------------------------------------------------------------
    def StreamChannel(self, request_iterator: Iterator[p4r.StreamMessageRequest],
                      context: grpc.ServicerContext) -> Iterator[p4r.StreamMessageResponse]:
        client = Client()
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
                self._leave(client)
                context.abort(*client.end_status)
        finally:
            self._leave(client)

    def _leave(self, client: Client) -> None:
        """A stream ended: forget its client; if it was the primary, tell the others there is none."""
        with self.lock:
            if client not in self.clients:
                return
            self.clients.remove(client)
            was_primary = client is self.primary
            if was_primary:
                self.primary = None
        if was_primary:
            self._announce()

    def _read_stream(self, client: Client, requests: Iterator[p4r.StreamMessageRequest],
                     context: grpc.ServicerContext) -> None:
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

    def _arbitrate(self, client: Client, update: p4r.MasterArbitrationUpdate, context: grpc.ServicerContext) -> None:
        """P4Runtime spec, "Rules for Handling MasterArbitrationUpdate Messages": the errors end
        the stream with their status; an accepted update with election id >= the highest ever
        seen makes its client primary, anything lower (or unset) leaves it a backup."""
        if update.device_id != self.device.device_id:
            # First update on the stream: an unknown device; later: not the stream's device.
            code = grpc.StatusCode.FAILED_PRECONDITION if client.arbitrated else grpc.StatusCode.NOT_FOUND
            client.end(code, f"device id {update.device_id} is not this switch's ({self.device.device_id})")
            return
        election_id = election(update.election_id) if update.HasField("election_id") else None
        with self.lock:
            if election_id is not None and any(c is not client and c.election_id == election_id
                                               for c in self.clients):
                client.end(grpc.StatusCode.INVALID_ARGUMENT, f"election id {election_id} is used by another client")
                return
            client.arbitrated = True
            client.election_id = election_id
            was_primary = client is self.primary
            if election_id is not None and (self.election_past is None or election_id >= self.election_past):
                self.election_past = election_id
                self.primary = client
                changed = not was_primary
                everyone = True
            else:
                if was_primary:
                    self.primary = None  # downgraded itself: nobody is primary now
                changed = was_primary
                everyone = was_primary
        if everyone:
            self._announce()
        else:
            self._notify(client)
        if changed:
            log.info("primary is now %s", self.primary_election_id())

    def _notify(self, client: Client) -> None:
        """Spec, "Client Arbitration Notifications": the highest election id seen (unset if there
        never was a primary); OK to the primary, ALREADY_EXISTS to backups while there is one,
        NOT_FOUND to backups while there is none."""
        with self.lock:
            primary, past = self.primary, self.election_past
        message = p4r.StreamMessageResponse()
        arb = message.arbitration
        arb.device_id = self.device.device_id
        if past is not None:
            arb.election_id.high, arb.election_id.low = past >> 64, past & ((1 << 64) - 1)
        if client is primary:
            arb.status.code, arb.status.message = rpc_code.OK, "is primary"
        elif primary is not None:
            arb.status.code, arb.status.message = rpc_code.ALREADY_EXISTS, "is backup"
        else:
            arb.status.code, arb.status.message = rpc_code.NOT_FOUND, "is backup; there is no primary"
        client.send(message)

    def _announce(self) -> None:
        """Tell every arbitrated client who the primary is."""
        with self.lock:
            clients = [c for c in self.clients if c.arbitrated]
        for c in clients:
            self._notify(c)

    def _stream_error(self, client: Client, code: grpc.StatusCode, message: str) -> None:
        response = p4r.StreamMessageResponse()
        response.error.canonical_code = code.value[0]
        response.error.message = message
        client.send(response)

    def _packet_out(self, client: Client, packet: p4r.PacketOut) -> None:
        if client is not self.primary:
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
        target = self.primary
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
