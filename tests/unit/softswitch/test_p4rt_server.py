"""P4Runtime conformance of the soft switch server, driven with the P4Runtime protos (no root)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time

import grpc
import pytest

from controller import entities as ent
from controller.p4rt_client import SwitchSession, update_errors
from softswitch.p4rt_server import DEFAULT_MAX_STREAMS, Device, P4RuntimeService, serve
from softswitch.pipeline import Pipeline
from softswitch.runtime_state import RuntimeState
from tests.checks import wait_until
from wire.p4info import DEFAULT_P4INFO, P4Schema
from wire.proto import CLIENT_CHANNEL_OPTIONS, p4r, p4r_grpc

DEVICE_ID = 7
CAPABILITIES_MEDIAN_S = 0.1


class Stream:
    """A StreamChannel client: send requests, receive responses with a timeout."""

    def __init__(self, stub: p4r_grpc.P4RuntimeStub) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.responses: queue.Queue = queue.Queue()
        self.error: grpc.StatusCode | None = None  # how the server ended the stream, if it did
        self.call = stub.StreamChannel(iter(self.requests.get, None))
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for response in self.call:
                self.responses.put(response)
        except grpc.RpcError as exc:
            self.error = exc.code()

    def request_arbitration(self, election_low: int, device_id: int = DEVICE_ID) -> None:
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = device_id
        request.arbitration.election_id.low = election_low
        self.requests.put(request)

    def arbitrate(self, election_low: int) -> p4r.StreamMessageResponse:
        self.request_arbitration(election_low)
        return self.next("arbitration")

    def next(self, kind: str, timeout: float = 5.0) -> p4r.StreamMessageResponse:
        while True:
            response = self.responses.get(timeout=timeout)
            if response.WhichOneof("update") == kind:
                return response

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


@pytest.fixture(scope="module")
def schema() -> P4Schema:
    return P4Schema.load()


@pytest.fixture()
def switch(schema):
    pipeline = Pipeline(RuntimeState(schema))
    sent: list[tuple[int, bytes]] = []
    device = Device(DEVICE_ID, 255, lambda s, state: pipeline.bind(state), lambda port, data: sent.append((port, data)))
    service = P4RuntimeService(device)
    server, port = serve(service, "127.0.0.1:0")
    service.address = f"127.0.0.1:{port}"  # for tests that bring their own client
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = p4r_grpc.P4RuntimeStub(channel)
    streams: list[Stream] = []

    def open_stream(election_low: int) -> tuple[Stream, p4r.StreamMessageResponse]:
        stream = Stream(stub)
        streams.append(stream)
        return stream, stream.arbitrate(election_low)

    yield stub, open_stream, pipeline, sent, service
    for stream in streams:
        stream.close()
    channel.close()
    server.stop(0)


def push_pipeline(stub, schema, election_low=10):
    request = p4r.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    request.election_id.low = election_low
    request.config.p4info.CopyFrom(schema.p4info)
    stub.SetForwardingPipelineConfig(request)


def write(stub, updates, election_low=10):
    request = p4r.WriteRequest(device_id=DEVICE_ID)
    request.election_id.low = election_low
    request.updates.extend(updates)
    return stub.Write(request)


def update_failed(exc: grpc.RpcError) -> grpc.StatusCode:
    """The code of a one-update Write's update: the call is UNKNOWN and the update's own code is in
    its one p4.v1.Error (P4Runtime spec, "Write RPC" error reporting; p4runtime-shell raises its
    P4RuntimeWriteException only so)."""
    assert exc.code() == grpc.StatusCode.UNKNOWN, (exc.code(), exc.details())
    (error,) = update_errors(exc)
    return next(code for code in grpc.StatusCode if code.value[0] == error.canonical_code)


def lpm_entry(schema, ip="10.0.3.1", plen=32, member_id=1):
    return ent.table_entry(schema, "StarIngress.ipv4_lpm", {"hdr.ipv4.dst_addr": (ip, plen)}, member_id=member_id)


def nhop_member(schema, member_id=1, port=1):
    return ent.member(schema, "StarIngress.ecmp_selector", member_id,
                      ent.action(schema, "StarIngress.set_nhop", port=port, smac="02:00:00:00:00:01",
                                 dmac="02:00:00:00:00:02"))


@pytest.fixture()
def primary(switch, schema):
    stub, open_stream, *_ = switch
    stream, arb = open_stream(10)
    assert arb.arbitration.status.code == 0
    push_pipeline(stub, schema)
    return stub, stream


def test_capabilities(switch):
    stub, *_ = switch
    assert stub.Capabilities(p4r.CapabilitiesRequest()).p4runtime_api_version.startswith("1.")


def test_primary_election_highest_id_wins(switch):
    _, open_stream, *_ = switch
    low, arb_low = open_stream(5)
    assert arb_low.arbitration.status.code == 0
    high, arb_high = open_stream(9)
    assert arb_high.arbitration.status.code == 0
    demoted = low.next("arbitration")
    assert demoted.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    assert demoted.arbitration.election_id.low == 9


def test_unknown_table_id_is_not_found(primary, schema):
    stub, _ = primary
    entry = lpm_entry(schema)
    entry.table_id = 12345
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(entry)])
    assert update_failed(info.value) == grpc.StatusCode.NOT_FOUND
    assert "unknown table id 12345" in info.value.details()


def test_unknown_action_id_is_invalid_argument(primary, schema):
    stub, _ = primary
    member = nhop_member(schema)
    member.action.action_id = 999
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(member)])
    assert update_failed(info.value) == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown action id 999" in info.value.details()


def test_action_not_in_table_is_invalid_argument(primary, schema):
    stub, _ = primary
    entry = ent.table_entry(schema, "StarEgress.port_config", {"standard_metadata.egress_port": 1},
                            action_call=ent.action(schema, "StarIngress.set_port_role", role=1))
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(entry)])
    assert update_failed(info.value) == grpc.StatusCode.INVALID_ARGUMENT
    assert "not an action of this table" in info.value.details()


def test_duplicate_insert_is_already_exists(primary, schema):
    stub, _ = primary
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema))])
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(lpm_entry(schema))])
    assert update_failed(info.value) == grpc.StatusCode.ALREADY_EXISTS


def test_batch_reports_each_update(primary, schema):
    stub, _ = primary
    write(stub, [ent.insert(nhop_member(schema))])
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(lpm_entry(schema, "10.0.3.2")), ent.insert(nhop_member(schema))])
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    codes = [e.canonical_code for e in update_errors(info.value)]
    assert codes == [0, grpc.StatusCode.ALREADY_EXISTS.value[0]]


def test_bad_lpm_value_is_invalid_argument(primary, schema):
    stub, _ = primary
    write(stub, [ent.insert(nhop_member(schema))])
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(lpm_entry(schema, "10.0.3.1", 24))])
    assert update_failed(info.value) == grpc.StatusCode.INVALID_ARGUMENT
    assert "beyond prefix_len" in info.value.details()


def test_missing_member_is_not_found(primary, schema):
    stub, _ = primary
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(lpm_entry(schema, member_id=42))])
    assert update_failed(info.value) == grpc.StatusCode.NOT_FOUND


def test_non_primary_write_is_permission_denied(switch, schema):
    stub, open_stream, *_ = switch
    open_stream(10)
    push_pipeline(stub, schema)
    backup, arb = open_stream(3)
    assert arb.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(nhop_member(schema))], election_low=3)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_write_without_pipeline_is_failed_precondition(switch, schema):
    stub, open_stream, *_ = switch
    open_stream(10)
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(nhop_member(schema))])
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_wrong_device_id_is_not_found(primary, schema):
    stub, _ = primary
    request = p4r.WriteRequest(device_id=DEVICE_ID + 1)
    request.election_id.low = 10
    with pytest.raises(grpc.RpcError) as info:
        stub.Write(request)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_read_returns_what_was_written(primary, schema):
    stub, _ = primary
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema))])
    query = p4r.ReadRequest(device_id=DEVICE_ID)
    query.entities.add().table_entry.table_id = schema.id_of("StarIngress.ipv4_lpm")
    found = [e for r in stub.Read(query) for e in r.entities]
    assert len(found) == 1
    assert found[0].table_entry == lpm_entry(schema)


def test_counters_read_by_index(primary, schema, switch):
    stub, _ = primary
    pipeline = switch[2]
    pipeline.tx_packets[3] = 11
    pipeline.tx_bytes[3] = 1100
    query = p4r.ReadRequest(device_id=DEVICE_ID)
    ce = query.entities.add().counter_entry
    ce.counter_id = schema.id_of("StarEgress.port_tx")
    ce.index.index = 3
    found = [e for r in stub.Read(query) for e in r.entities]
    assert found[0].counter_entry.data.packet_count == 11
    assert found[0].counter_entry.data.byte_count == 1100


def test_packet_out_from_primary_reaches_port(primary, schema, switch):
    _, stream = primary
    sent = switch[3]
    request = p4r.StreamMessageRequest()
    request.packet.payload = b"\x01" * 60
    request.packet.metadata.add(metadata_id=1, value=b"\x02")
    stream.requests.put(request)
    for _ in range(50):
        if sent:
            break
        threading.Event().wait(0.05)
    assert sent == [(2, b"\x01" * 60)]


def test_packet_in_goes_to_primary(primary, switch):
    _, stream = primary
    service = switch[4]
    service.send_packet_in(b"\xaa" * 64, 4, 1)
    message = stream.next("packet")
    meta = {m.metadata_id: m.value for m in message.packet.metadata}
    assert message.packet.payload == b"\xaa" * 64
    assert meta[1] == b"\x04" and meta[2] == b"\x01"


def test_spec_stream_limit_streams_beyond_it_are_refused_and_unary_calls_never_wait(switch):
    """P4Runtime spec, "StreamChannel" arbitration: streams beyond the supported limit end with
    RESOURCE_EXHAUSTED. 100 StreamChannels at once: the first DEFAULT_MAX_STREAMS are served (arbitration answered),
    the rest refused with RESOURCE_EXHAUSTED; Capabilities answers all along (it used to time out
    once 8 streams held every server thread)."""
    stub, _, _, _, service = switch
    streams = [Stream(stub) for _ in range(100)]
    try:
        for i, stream in enumerate(streams):
            stream.request_arbitration(i + 1)
        latencies = []

        def settled() -> bool:
            started = time.monotonic()
            stub.Capabilities(p4r.CapabilitiesRequest(), timeout=2.0)
            latencies.append(time.monotonic() - started)
            return all(s.error is not None or not s.responses.empty() for s in streams)

        assert wait_until(settled, 20.0, 0.02), "some streams got neither an answer nor a refusal"
        answered = [s for s in streams if s.error is None]
        refused = [s.error for s in streams if s.error is not None]
        assert len(answered) == service.max_streams == DEFAULT_MAX_STREAMS
        assert set(refused) == {grpc.StatusCode.RESOURCE_EXHAUSTED} and len(refused) == 100 - DEFAULT_MAX_STREAMS
        for _ in range(20):  # and while the served streams stay open
            settled()
        latencies.sort()
        median = latencies[len(latencies) // 2]
        print(f"Capabilities: {len(latencies)} calls, median {1e3 * median:.1f} ms, max {1e3 * latencies[-1]:.1f} ms")
        assert median <= CAPABILITIES_MEDIAN_S, latencies
    finally:
        for stream in streams:
            stream.close()
    # Closed streams free their slots: a new client is served again.
    assert wait_until(lambda: not service.clients, 5.0), f"{len(service.clients)} streams still held"
    fresh = Stream(stub)
    try:
        assert fresh.arbitrate(1000).arbitration.status.code == 0
    finally:
        fresh.close()


def half_failing_batch(stub, schema) -> list[p4r.Update]:
    """10,000 updates whose odd ones fail (NOT_FOUND: no such table), after writing what the even
    ones modify."""
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema))])
    bad = lpm_entry(schema, "10.0.3.9")
    bad.table_id = 12345
    return [ent.modify(lpm_entry(schema)) if i % 2 == 0 else ent.insert(bad) for i in range(10_000)]


def test_spec_grpc_metadata_maximum_size_a_big_failed_batch_is_readable(primary, schema):
    """P4Runtime spec, "gRPC Metadata Maximum Size" (and "Write RPC"): one p4.Error per update would
    be ~350 KB of trailers for 10,000 updates, far beyond gRPC's 8 KiB default, and the client would
    get a bare RESOURCE_EXHAUSTED. The details are cut to the first updates, in order, and the
    message counts the failures left out: every client can read them."""
    stub, _ = primary
    updates = half_failing_batch(stub, schema)
    with pytest.raises(grpc.RpcError) as info:
        write(stub, updates)
    assert info.value.code() == grpc.StatusCode.UNKNOWN, info.value.details()
    assert "5000 of 10000 updates failed" in info.value.details()
    codes = [e.canonical_code for e in update_errors(info.value)]
    assert len(codes) >= 50, f"only {len(codes)} details"
    assert codes == [0 if i % 2 == 0 else grpc.StatusCode.NOT_FOUND.value[0] for i in range(len(codes))]
    left_out = 5000 - codes.count(grpc.StatusCode.NOT_FOUND.value[0])
    assert f"details for the first {len(codes)} of 10000 updates; {left_out} more failed" in info.value.details()


def test_a_switch_run_with_every_error_detail_hands_a_client_that_reads_them_one_per_update(schema):
    """--error-details-bytes 0: all 10,000 details, in order, to a client with
    CLIENT_CHANNEL_OPTIONS (the controller's); a default client gets gRPC's bare RESOURCE_EXHAUSTED,
    which is why it is not the default."""
    pipeline = Pipeline(RuntimeState(schema))
    device = Device(DEVICE_ID, 255, lambda s, state: pipeline.bind(state), lambda port, data: None)
    server, port = serve(P4RuntimeService(device, error_details_bytes=0), "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=CLIENT_CHANNEL_OPTIONS) as channel:
            stub = p4r_grpc.P4RuntimeStub(channel)
            stream = Stream(stub)
            try:
                assert stream.arbitrate(10).arbitration.status.code == 0
                push_pipeline(stub, schema)
                updates = half_failing_batch(stub, schema)
                with pytest.raises(grpc.RpcError) as info:
                    write(stub, updates)
                codes = [e.canonical_code for e in update_errors(info.value)]
                assert codes == [0 if i % 2 == 0 else grpc.StatusCode.NOT_FOUND.value[0] for i in range(10_000)]
                with grpc.insecure_channel(f"127.0.0.1:{port}") as default_channel:
                    with pytest.raises(grpc.RpcError) as info:
                        write(p4r_grpc.P4RuntimeStub(default_channel), updates)
                    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            finally:
                stream.close()
    finally:
        server.stop(0)


def test_spec_bytestrings_a_value_beyond_its_bitwidth_is_out_of_range(primary, schema):
    """P4Runtime spec, "Bytestrings": a value that does not fit the bitwidth is OUT_OF_RANGE."""
    stub, _ = primary
    member = nhop_member(schema, member_id=7, port=1)
    member.action.params[0].value = (512).to_bytes(2, "big")  # port is bit<9>
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(member)])
    assert update_failed(info.value) == grpc.StatusCode.OUT_OF_RANGE
    entry = ent.table_entry(schema, "StarIngress.port_role", {"standard_metadata.ingress_port": 1},
                            action_call=ent.action(schema, "StarIngress.set_port_role", role=1))
    entry.action.action.params[0].value = (0x100).to_bytes(2, "big")  # role is bit<8>
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(entry)])
    assert update_failed(info.value) == grpc.StatusCode.OUT_OF_RANGE


def test_spec_counterentry_an_index_beyond_the_counter_is_out_of_range(primary, schema):
    """P4Runtime spec, "CounterEntry": OUT_OF_RANGE if the index exceeds the size of the array."""
    stub, _ = primary
    request = p4r.ReadRequest(device_id=DEVICE_ID)
    counter = request.entities.add().counter_entry
    counter.counter_id = schema.id_of("StarEgress.port_tx")
    counter.index.index = 100_000
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Read(request))
    assert info.value.code() == grpc.StatusCode.UNKNOWN, info.value.details()  # the Read batch form
    assert [e.canonical_code for e in update_errors(info.value)] == [grpc.StatusCode.OUT_OF_RANGE.value[0]]


def test_spec_group_programming_a_group_listing_a_member_twice_is_invalid(primary, schema):
    """P4Runtime spec, "Group Programming": `members` must not include duplicates."""
    stub, _ = primary
    write(stub, [ent.insert(nhop_member(schema))])
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(ent.group(schema, "StarIngress.ecmp_selector", 1, [(1, 1), (1, 1)]))])
    assert update_failed(info.value) == grpc.StatusCode.INVALID_ARGUMENT


def test_spec_member_programming_a_profile_takes_no_more_members_than_its_size(primary, schema):
    """P4Runtime spec, "Member Programming": beyond the extern's size, RESOURCE_EXHAUSTED."""
    stub, _ = primary
    size = schema.action_profile("StarIngress.ecmp_selector").size
    write(stub, [ent.insert(nhop_member(schema, member_id=i + 1)) for i in range(size)])
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [ent.insert(nhop_member(schema, member_id=size + 1))])
    assert update_failed(info.value) == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_spec_arbitration_rules_unknown_device_and_taken_election_id_end_the_stream(switch):
    """P4Runtime spec, "Rules for Handling MasterArbitrationUpdate Messages": an unknown device id
    terminates the stream with NOT_FOUND; an election id another live client holds, INVALID_ARGUMENT."""
    stub, open_stream, _, _, service = switch
    stranger = Stream(stub)
    try:
        stranger.request_arbitration(3, device_id=DEVICE_ID + 1)
        assert wait_until(lambda: stranger.error is not None, 5.0), "the stream was not ended"
        assert stranger.error == grpc.StatusCode.NOT_FOUND
    finally:
        stranger.close()
    first, arb = open_stream(4)
    assert arb.arbitration.status.code == 0
    second = Stream(stub)
    try:
        second.request_arbitration(4)
        assert wait_until(lambda: second.error is not None, 5.0), "the stream was not ended"
        assert second.error == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        second.close()
    assert first.error is None and service.primary_election_id() == 4


# ---- Read RPC -----------------------------------------------------------------------------------
def test_spec_read_batch_processing_returns_what_was_found_then_unknown_with_one_error_per_entity(primary, schema):
    """P4Runtime spec, "Read RPC" / "Batch Processing": a read of {a, b, c, d} where b and d do
    not validate returns a's and c's entities, then UNKNOWN with details {OK, b's, d's... , OK}
    in the same order; an empty Entity is INVALID_ARGUMENT ("Wildcard Reads")."""
    stub, _ = primary
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema))])
    request = p4r.ReadRequest(device_id=DEVICE_ID)
    request.entities.add().table_entry.table_id = schema.id_of("StarIngress.ipv4_lpm")
    request.entities.add().table_entry.table_id = 12345                   # no such table
    request.entities.add().action_profile_member.action_profile_id = schema.id_of("StarIngress.ecmp_selector")
    request.entities.add()                                                # empty Entity
    responses = stub.Read(request)
    found = []
    with pytest.raises(grpc.RpcError) as info:
        for response in responses:
            found.extend(response.entities)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert [e.WhichOneof("entity") for e in found] == ["table_entry", "action_profile_member"]
    codes = [grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT]
    assert [e.canonical_code for e in update_errors(info.value)] == [c.value[0] for c in codes]


def test_spec_read_rpc_a_read_without_entities_fails_for_none(primary):
    stub, _ = primary
    assert [r for r in stub.Read(p4r.ReadRequest(device_id=DEVICE_ID)) if r.entities] == []


# ---- SetForwardingPipelineConfig RPC ----------------------------------------------------------------
def set_pipeline(stub, schema, action, with_config=True, election_low=10, cookie=0):
    request = p4r.SetForwardingPipelineConfigRequest(device_id=DEVICE_ID, action=action)
    request.election_id.low = election_low
    if with_config:
        request.config.p4info.CopyFrom(schema.p4info)
        request.config.cookie.cookie = cookie
    return stub.SetForwardingPipelineConfig(request)


def lpm_entries(stub, schema) -> int:
    query = p4r.ReadRequest(device_id=DEVICE_ID)
    query.entities.add().table_entry.table_id = schema.id_of("StarIngress.ipv4_lpm")
    return sum(len(r.entities) for r in stub.Read(query))


def test_spec_setforwardingpipelineconfig_verify_and_save_keeps_forwarding_until_commit(primary, schema, switch):
    """VERIFY_AND_SAVE: the forwarding state is not modified, Read/Write refer to the new config;
    COMMIT realizes it with the writes made since the save."""
    stub, _ = primary
    pipeline = switch[2]
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema))])
    running = pipeline.state
    set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_SAVE)
    assert pipeline.state is running and len(running.table_by_name("StarIngress.ipv4_lpm").entries) == 1
    assert lpm_entries(stub, schema) == 0  # Read sees the saved config's (empty) state
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema, "10.0.9.0", 24))])
    assert len(running.table_by_name("StarIngress.ipv4_lpm").entries) == 1  # data plane unchanged
    set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.COMMIT, with_config=False)
    assert pipeline.state is not running
    assert [e.proto.match[0].lpm.prefix_len for e in pipeline.state.table_by_name("StarIngress.ipv4_lpm")
            .entries.values()] == [24]


def test_spec_getforwardingpipelineconfig_before_any_pipeline_leaves_config_unset(switch, schema):
    """Every response type: OK and no `config` field until a pipeline is set (finsy then pushes its
    own instead of taking an empty P4Info for a different program); a saved one is returned."""
    stub, open_stream, *_ = switch
    open_stream(10)
    kinds = p4r.GetForwardingPipelineConfigRequest
    for kind in (kinds.ALL, kinds.COOKIE_ONLY, kinds.P4INFO_AND_COOKIE, kinds.DEVICE_CONFIG_AND_COOKIE):
        got = stub.GetForwardingPipelineConfig(kinds(device_id=DEVICE_ID, response_type=kind))
        assert not got.HasField("config"), kind
    set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_SAVE, cookie=7)
    got = stub.GetForwardingPipelineConfig(kinds(device_id=DEVICE_ID, response_type=kinds.ALL))
    assert got.config.cookie.cookie == 7 and got.config.p4info == schema.p4info


def test_finsy_drives_a_fresh_soft_switch_without_a_warning(switch, caplog):
    """finsy 0.30.0, a third-party P4Runtime client, on a switch with no pipeline: it pushes its
    own, writes, reads back, and a failing one-update Write reaches it as the spec's UNKNOWN with
    the update's code (what its non-strict writes rely on) — and it logs no warning on the way
    but that the switch serves no gNMI."""
    import finsy as fy  # noqa: PLC0415 - the client under test, only here

    service = switch[4]

    def entry() -> fy.P4TableEntry:
        return fy.P4TableEntry("StarIngress.port_role", match=fy.P4TableMatch({"standard_metadata.ingress_port": 1}),
                               action=fy.P4TableAction("StarIngress.set_port_role", role=2))

    async def drive() -> tuple[list, fy.P4ClientError]:
        # The soft switch runs starnet.p4 from its P4Info and takes no device config: an empty one
        options = fy.SwitchOptions(p4info=DEFAULT_P4INFO, p4blob=b"", device_id=DEVICE_ID)
        async with fy.Switch("sw", service.address, options) as sw:
            await sw.write([+entry()])
            read = [e async for e in sw.read(fy.P4TableEntry("StarIngress.port_role"))]
            with pytest.raises(fy.P4ClientError) as info:
                await sw.write([+entry()])
            return read, info.value

    with caplog.at_level(logging.WARNING, logger="finsy"):
        read, failure = asyncio.run(drive())
    assert [(list(e.match.values()), e.action.args) for e in read] == [([1], {"role": 2})], read
    assert failure.code == fy.GRPCStatusCode.UNKNOWN
    assert [e.canonical_code for e in failure.details.values()] == [fy.GRPCStatusCode.ALREADY_EXISTS]
    # gNMI is a service of its own the soft switch does not serve (its ports are in P4 counters)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [w for w in warnings if "gNMI is not implemented" not in w] == []


def test_spec_setforwardingpipelineconfig_commit_without_a_saved_config_is_not_found(primary, schema):
    stub, _ = primary
    with pytest.raises(grpc.RpcError) as info:
        set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.COMMIT, with_config=False)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_SAVE)
    with pytest.raises(grpc.RpcError) as info:
        set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.COMMIT)  # with a config
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_spec_setforwardingpipelineconfig_reconcile_and_commit_preserves_the_forwarding_state(primary, schema, switch):
    stub, _ = primary
    pipeline = switch[2]
    write(stub, [ent.insert(nhop_member(schema)), ent.insert(lpm_entry(schema))])
    running = pipeline.state
    set_pipeline(stub, schema, p4r.SetForwardingPipelineConfigRequest.RECONCILE_AND_COMMIT, cookie=42)
    assert pipeline.state is running and lpm_entries(stub, schema) == 1
    got = stub.GetForwardingPipelineConfig(p4r.GetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, response_type=p4r.GetForwardingPipelineConfigRequest.COOKIE_ONLY))
    assert got.config.cookie.cookie == 42
    other = P4Schema.from_message(schema.p4info)
    other.p4info.tables[0].size += 1  # a different program: its state cannot be kept
    with pytest.raises(grpc.RpcError) as info:
        set_pipeline(stub, other, p4r.SetForwardingPipelineConfigRequest.RECONCILE_AND_COMMIT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert lpm_entries(stub, schema) == 1


def test_spec_setforwardingpipelineconfig_verify_and_commit_without_config_is_invalid(primary, schema):
    stub, _ = primary
    actions = p4r.SetForwardingPipelineConfigRequest
    for action in (actions.VERIFY, actions.VERIFY_AND_SAVE, actions.VERIFY_AND_COMMIT):
        with pytest.raises(grpc.RpcError) as info:
            set_pipeline(stub, schema, action, with_config=False)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ---- arbitration ----------------------------------------------------------------------------------
def test_spec_arbitration_when_the_primary_leaves_no_lower_id_becomes_primary(switch):
    """"Rules for Handling MasterArbitrationUpdate Messages": a client is primary only with an
    election id >= the highest ever seen. When the primary leaves, the backups hear NOT_FOUND
    (no primary) with that highest id, and one becomes primary by sending an id >= it."""
    stub, open_stream, _, _, service = switch
    backup, arb = open_stream(3)
    assert arb.arbitration.status.code == 0  # the first: primary
    primary, arb = open_stream(8)
    assert arb.arbitration.status.code == 0
    assert backup.next("arbitration").arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    primary.close()
    note = backup.next("arbitration").arbitration
    assert (note.status.code, note.election_id.low) == (grpc.StatusCode.NOT_FOUND.value[0], 8)
    assert service.primary_election_id() is None
    with pytest.raises(grpc.RpcError) as info:
        write(stub, [], election_low=3)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert backup.arbitrate(8).arbitration.status.code == 0  # >= the highest seen: primary
    assert service.primary_election_id() == 8


def test_spec_unset_election_id_never_becomes_primary_nor_writes(switch, schema):
    """"Unset Election ID": lower than any election id; such a client is never primary."""
    stub, open_stream, _, _, service = switch
    stream = Stream(stub)
    request = p4r.StreamMessageRequest()
    request.arbitration.device_id = DEVICE_ID  # no election_id
    stream.requests.put(request)
    try:
        note = stream.next("arbitration").arbitration
        assert note.status.code == grpc.StatusCode.NOT_FOUND.value[0]
        assert not note.HasField("election_id")  # there never was a primary
        assert service.primary is None
        unset = p4r.WriteRequest(device_id=DEVICE_ID)  # no election_id either
        with pytest.raises(grpc.RpcError) as info:
            stub.Write(unset)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        zero, arb = open_stream(0)  # {high: 0, low: 0} is set, and differs from unset
        assert arb.arbitration.status.code == 0
        assert stream.next("arbitration").arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    finally:
        stream.close()


def test_spec_arbitration_a_live_stream_that_changes_its_device_id_is_ended(switch):
    _, open_stream, *_ = switch
    stream, arb = open_stream(5)
    assert arb.arbitration.status.code == 0
    stream.request_arbitration(5, device_id=DEVICE_ID + 1)
    assert wait_until(lambda: stream.error is not None, 5.0)
    assert stream.error == grpc.StatusCode.FAILED_PRECONDITION


def test_controller_session_takes_the_switch_back_after_a_takeover_ends(switch, schema):
    """The controller's SwitchSession (election id 10) loses primary to a client with 100 (`make
    shell ELECTION=0,100`); when that client leaves, nobody may be primary below 100, so the
    session arbitrates again with 101 and can write."""
    stub, open_stream, _, _, service = switch
    address = service.address

    async def scenario() -> None:
        session = SwitchSession("ctl", address, DEVICE_ID, schema, election_id=10)
        await session.connect()
        await session.set_pipeline()
        taker, arb = await asyncio.to_thread(open_stream, 100)
        assert arb.arbitration.status.code == 0
        await asyncio.wait_for(until(lambda: not session.is_primary.is_set()), 5)
        taker.close()
        await asyncio.wait_for(session.is_primary.wait(), 5)
        assert session.election_id == 101 and service.primary_election_id() == 101
        await session.write([ent.insert(nhop_member(schema))])
        await session.close()
    asyncio.run(scenario())


async def until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.02)
