"""P4Runtime Read of a soft switch's runtime state: table entries (or a table's default action),
action profile members and groups, counters (synced from the data plane first), clone sessions,
parser value sets.
RuntimeState.read calls it with its lock held."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from softswitch.errors import not_found, out_of_range, unimplemented
from softswitch.tables import ActionProfileState, CounterState, TableState
from softswitch.valuesets import ValueSets
from wire.proto import p4r


class Readable(Protocol):
    tables: dict[int, TableState]
    profiles: dict[int, ActionProfileState]
    counters: dict[int, CounterState]
    clone_sessions: dict[int, p4r.CloneSessionEntry]
    value_sets: ValueSets
    counter_sync: list[Callable[[], None]]


def read_entities(state: Readable, entity: p4r.Entity) -> Iterator[p4r.Entity]:
    which = entity.WhichOneof("entity")
    if which == "table_entry":
        yield from _read_table_entries(state, entity.table_entry)
    elif which == "action_profile_member":
        yield from _read_members(state, entity.action_profile_member)
    elif which == "action_profile_group":
        yield from _read_groups(state, entity.action_profile_group)
    elif which == "counter_entry":
        yield from _read_counters(state, entity.counter_entry)
    elif which == "packet_replication_engine_entry":
        for session in state.clone_sessions.values():
            out = p4r.Entity()
            out.packet_replication_engine_entry.clone_session_entry.CopyFrom(session)
            yield out
    elif which == "value_set_entry":
        yield from state.value_sets.read(entity.value_set_entry)
    else:
        raise unimplemented(f"reading {which} is not supported by the soft switch")


def _read_table_entries(state: Readable, query: p4r.TableEntry) -> Iterator[p4r.Entity]:
    if query.table_id and query.table_id not in state.tables:
        raise not_found(f"unknown table id {query.table_id}")
    tables = [state.tables[query.table_id]] if query.table_id else list(state.tables.values())
    for table in tables:
        if query.is_default_action:
            out = p4r.Entity()
            out.table_entry.CopyFrom(table.default_proto)
            yield out
            continue
        for entry in list(table.entries.values()):
            if query.match and list(entry.proto.match) != list(query.match):
                continue
            out = p4r.Entity()
            out.table_entry.CopyFrom(entry.proto)
            yield out


def _profiles_for(state: Readable, profile_id: int) -> list[int]:
    if not profile_id:
        return list(state.profiles)
    if profile_id not in state.profiles:
        raise not_found(f"unknown action profile id {profile_id}")
    return [profile_id]


def _read_members(state: Readable, query: p4r.ActionProfileMember) -> Iterator[p4r.Entity]:
    for pid in _profiles_for(state, query.action_profile_id):
        for mid, (_, proto) in list(state.profiles[pid].members.items()):
            if not query.member_id or query.member_id == mid:
                yield p4r.Entity(action_profile_member=proto)


def _read_groups(state: Readable, query: p4r.ActionProfileGroup) -> Iterator[p4r.Entity]:
    for pid in _profiles_for(state, query.action_profile_id):
        for gid, (_, proto) in list(state.profiles[pid].groups.items()):
            if not query.group_id or query.group_id == gid:
                yield p4r.Entity(action_profile_group=proto)


def _read_counters(state: Readable, query: p4r.CounterEntry) -> Iterator[p4r.Entity]:
    for sync in state.counter_sync:
        sync()
    if query.counter_id:
        if query.counter_id not in state.counters:
            raise not_found(f"unknown counter id {query.counter_id}")
        ids = [query.counter_id]
    else:
        ids = list(state.counters)
    for cid in ids:
        counter = state.counters[cid]
        if query.HasField("index"):
            if not 0 <= query.index.index < counter.size:
                raise out_of_range(f"counter index {query.index.index} out of range 0..{counter.size - 1}")
            indices: range | list[int] = [query.index.index]
        else:
            indices = range(counter.size)
        for i in indices:
            out = p4r.Entity()
            out.counter_entry.counter_id = cid
            out.counter_entry.index.index = i
            out.counter_entry.data.packet_count = counter.packets[i]
            out.counter_entry.data.byte_count = counter.bytes[i]
            yield out
