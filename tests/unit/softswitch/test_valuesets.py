"""Parser value sets over the soft switch's P4Runtime state: P4Runtime's ValueSetEntry rules."""

from __future__ import annotations

import grpc
import pytest

from controller import entities as ent
from softswitch.errors import P4RuntimeError
from softswitch.runtime_state import RuntimeState
from wire.p4info import P4Schema
from wire.proto import p4r

INT_DSCP = "StarParser.int_dscp"


@pytest.fixture()
def state() -> RuntimeState:
    return RuntimeState(P4Schema.load())


def code_of(state: RuntimeState, update: p4r.Update) -> grpc.StatusCode:
    with pytest.raises(P4RuntimeError) as caught:
        state.apply(update)
    return caught.value.code


def read_all(state: RuntimeState) -> list[p4r.ValueSetEntry]:
    query = p4r.Entity()
    query.value_set_entry.SetInParent()
    return [e.value_set_entry for e in state.read(query)]


def test_modify_replaces_the_set_and_reads_back_as_written(state):
    assert state.value_sets.by_name(INT_DSCP) == frozenset()  # empty: nothing is INT until written
    state.apply(ent.modify(ent.value_set(state.schema, INT_DSCP, [0x20, 0x0A])))
    assert state.value_sets.by_name(INT_DSCP) == {0x20, 0x0A}
    state.apply(ent.modify(ent.value_set(state.schema, INT_DSCP, [0x18])))
    assert state.value_sets.by_name(INT_DSCP) == {0x18}
    (entry,) = read_all(state)
    assert entry.value_set_id == state.schema.id_of(INT_DSCP)
    assert [m.match[0].exact.value for m in entry.members] == [b"\x18"]


def test_invalid_value_set_writes_get_the_spec_codes_and_change_nothing(state):
    schema = state.schema
    state.apply(ent.modify(ent.value_set(schema, INT_DSCP, [0x20])))
    good = ent.value_set(schema, INT_DSCP, [0x0A])
    assert code_of(state, ent.insert(good)) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(state, ent.delete(good)) == grpc.StatusCode.INVALID_ARGUMENT
    unknown = p4r.ValueSetEntry(value_set_id=12345)
    assert code_of(state, ent.modify(unknown)) == grpc.StatusCode.NOT_FOUND
    assert code_of(state, ent.modify(ent.value_set(schema, INT_DSCP, [1, 2, 3, 4, 5]))) == \
        grpc.StatusCode.RESOURCE_EXHAUSTED  # size 4
    too_wide = ent.value_set(schema, INT_DSCP, [0x0A])
    too_wide.members[0].match[0].exact.value = b"\x40"  # 64 in a bit<6>
    assert code_of(state, ent.modify(too_wide)) == grpc.StatusCode.OUT_OF_RANGE
    ternary = ent.value_set(schema, INT_DSCP, [])
    fm = ternary.members.add().match.add(field_id=1)
    fm.ternary.value, fm.ternary.mask = b"\x20", b"\x3f"
    assert code_of(state, ent.modify(ternary)) == grpc.StatusCode.INVALID_ARGUMENT
    assert state.value_sets.by_name(INT_DSCP) == {0x20}


def test_reading_an_unknown_value_set_is_not_found(state):
    query = p4r.Entity()
    query.value_set_entry.value_set_id = 999
    with pytest.raises(P4RuntimeError) as caught:
        list(state.read(query))
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
