"""P4Runtime-visible state of one soft switch: table entries, action profiles, counters, clone sessions,
parser value sets (softswitch/valuesets.py).

Every write is validated against the P4Info (names, ids, widths, match kinds) and fails with
the gRPC status the P4Runtime spec gives: unknown table/profile/counter ids NOT_FOUND, unknown or
misplaced action ids and malformed values INVALID_ARGUMENT, a duplicate INSERT ALREADY_EXISTS.
The data plane reads this state; `generation` changes on every successful write so it can drop
its flow cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc

from softswitch.errors import (
    P4RuntimeError,
    exhausted,
    exists,
    invalid,
    not_found,
    out_of_range,
    unimplemented,
    value_error,
)
from softswitch.reads import read_entities
from softswitch.tables import (
    ActionCall,
    ActionProfileState,
    CounterState,
    GroupMember,
    TableEntryState,
    TableState,
)
from softswitch.valuesets import ValueSets
from wire.p4info import ActionInfo, P4Schema, TableInfo, decode_value
from wire.proto import p4r

NO_ACTION = "NoAction"


def _check_presence(kind: int, present: bool, what: str) -> None:
    """P4Runtime spec §12: INSERT of what exists is ALREADY_EXISTS; MODIFY or DELETE of what does
    not is NOT_FOUND."""
    if kind == p4r.Update.INSERT and present:
        raise exists(f"{what} already exists")
    if kind != p4r.Update.INSERT and not present:
        raise not_found(f"{what} does not exist")

class RuntimeState:
    """All runtime objects of a pipeline built from one P4Info."""

    def __init__(self, schema: P4Schema) -> None:
        self.schema = schema
        self.lock = threading.RLock()
        self.generation = 0
        self.listeners: list[Callable[[], None]] = []
        # Called (under the lock) before counters are read or written, so the data plane can
        # fold in what it counted since the last call.
        self.counter_sync: list[Callable[[], None]] = []
        self.tables: dict[int, TableState] = {}
        for t in schema.tables.values():
            default = self._initial_default(t)
            proto = p4r.TableEntry(table_id=t.id, is_default_action=True)
            proto.action.action.action_id = default.action_id
            self.tables[t.id] = TableState(t, default, proto)
        self.profiles: dict[int, ActionProfileState] = {ap: ActionProfileState() for ap in schema.action_profiles}
        self.counters: dict[int, CounterState] = {
            c.id: CounterState(c.size, [0] * c.size, [0] * c.size) for c in schema.counters.values()
        }
        self.clone_sessions: dict[int, p4r.CloneSessionEntry] = {}
        self.value_sets = ValueSets(schema)

    def _initial_default(self, table: TableInfo) -> ActionCall:
        action_id = table.const_default_action_id
        if not action_id:
            names = {self.schema.actions[a].name: a for a in table.action_ids if a in self.schema.actions}
            drops = [a for n, a in names.items() if n.rsplit(".", 1)[-1] == "drop"]
            action_id = drops[0] if drops else names.get(NO_ACTION) or min(table.action_ids)
        info = self.schema.actions[action_id]
        return ActionCall(action_id, info.name, tuple(0 for _ in info.params))

    # ---- names used by the data plane ---------------------------------------------------------
    def table_by_name(self, name: str) -> TableState:
        return self.tables[self.schema.id_of(name)]

    def profile_by_name(self, name: str) -> ActionProfileState:
        return self.profiles[self.schema.id_of(name)]

    def counter_by_name(self, name: str) -> CounterState:
        return self.counters[self.schema.id_of(name)]

    # ---- writes --------------------------------------------------------------------------------
    def apply(self, update: p4r.Update) -> None:
        """Apply one Update atomically; raise P4RuntimeError and change nothing on failure."""
        kind = update.type
        if kind == p4r.Update.UNSPECIFIED:
            raise invalid("update type is UNSPECIFIED")
        which = update.entity.WhichOneof("entity")
        with self.lock:
            if which == "table_entry":
                self._write_table_entry(kind, update.entity.table_entry)
            elif which == "action_profile_member":
                self._write_member(kind, update.entity.action_profile_member)
            elif which == "action_profile_group":
                self._write_group(kind, update.entity.action_profile_group)
            elif which == "counter_entry":
                self._write_counter(kind, update.entity.counter_entry)
            elif which == "packet_replication_engine_entry":
                self._write_pre(kind, update.entity.packet_replication_engine_entry)
            elif which == "value_set_entry":
                self.value_sets.write(kind, update.entity.value_set_entry)
            elif which is None:
                raise invalid("update has no entity")
            else:
                raise unimplemented(f"entity {which} is not supported by the soft switch")
            self.generation += 1
        for listener in self.listeners:
            listener()

    def _table(self, table_id: int) -> TableState:
        table = self.tables.get(table_id)
        if table is None:
            raise not_found(f"unknown table id {table_id}")
        return table

    def _action_call(self, action: p4r.Action, allowed: frozenset[int] | None, where: str) -> ActionCall:
        info: ActionInfo | None = self.schema.actions.get(action.action_id)
        if info is None:
            raise invalid(f"{where}: unknown action id {action.action_id}")
        if allowed is not None and action.action_id not in allowed:
            raise invalid(f"{where}: action {info.name} is not an action of this table")
        given: dict[int, bytes] = {}
        for param in action.params:
            if param.param_id in given:
                raise invalid(f"{where}: parameter id {param.param_id} given twice for {info.name}")
            given[param.param_id] = param.value
        args = []
        for p in info.params:
            if p.id not in given:
                raise invalid(f"{where}: missing parameter {p.name} of {info.name}")
            try:
                args.append(decode_value(given.pop(p.id), p.bitwidth, f"{where}: {info.name}.{p.name}"))
            except ValueError as exc:
                raise value_error(exc) from None
        if given:
            raise invalid(f"{where}: unknown parameter id(s) {sorted(given)} for {info.name}")
        return ActionCall(info.id, info.name, tuple(args))

    def _match(self, table: TableInfo, entry: p4r.TableEntry) -> tuple[tuple[tuple[int, int], ...], int]:
        by_id: dict[int, p4r.FieldMatch] = {}
        for given in entry.match:
            if given.field_id in by_id:
                raise invalid(f"{table.name}: match field id {given.field_id} given twice")
            by_id[given.field_id] = given
        known = {f.id for f in table.match_fields}
        unknown = set(by_id) - known
        if unknown:
            raise invalid(f"{table.name}: unknown match field id(s) {sorted(unknown)}")
        fields: list[tuple[int, int]] = []
        prefix_len = 0
        for f in table.match_fields:
            full = (1 << f.bitwidth) - 1
            fm = by_id.get(f.id)
            what = f"{table.name}: {f.name}"
            if fm is None:
                if f.kind == "exact":
                    raise invalid(f"{what}: exact match field missing")
                fields.append((0, 0))
                continue
            kind = fm.WhichOneof("field_match_type")
            try:
                if f.kind == "exact" and kind == "exact":
                    fields.append((decode_value(fm.exact.value, f.bitwidth, what), full))
                elif f.kind == "optional" and kind == "optional":
                    fields.append((decode_value(fm.optional.value, f.bitwidth, what), full))
                elif f.kind == "lpm" and kind == "lpm":
                    plen = fm.lpm.prefix_len
                    if not 0 < plen <= f.bitwidth:
                        raise invalid(f"{what}: prefix_len {plen} out of range 1..{f.bitwidth} "
                                      "(a don't-care LPM field must be omitted)")
                    mask = full ^ ((1 << (f.bitwidth - plen)) - 1)
                    value = decode_value(fm.lpm.value, f.bitwidth, what)
                    if value & ~mask:
                        raise invalid(f"{what}: value has bits set beyond prefix_len {plen}")
                    prefix_len = plen
                    fields.append((value, mask))
                elif f.kind == "ternary" and kind == "ternary":
                    value = decode_value(fm.ternary.value, f.bitwidth, what)
                    mask = decode_value(fm.ternary.mask, f.bitwidth, what + " mask")
                    if mask == 0:
                        raise invalid(f"{what}: a don't-care ternary field must be omitted")
                    if value & ~mask:
                        raise invalid(f"{what}: value has bits set outside the mask")
                    fields.append((value, mask))
                elif f.kind == "range":
                    raise unimplemented(f"{what}: range matches are not supported")
                else:
                    raise invalid(f"{what}: {kind} match given for a {f.kind} field")
            except ValueError as exc:
                raise value_error(exc) from None
        return tuple(fields), prefix_len

    def _write_default_entry(self, kind: int, table: TableState, entry: p4r.TableEntry) -> None:
        info = table.info
        if kind != p4r.Update.MODIFY:
            raise invalid(f"{info.name}: the default entry can only be modified")
        if entry.match:
            raise invalid(f"{info.name}: the default entry has no match fields")
        if info.const_default_action_id:
            raise P4RuntimeError(grpc.StatusCode.PERMISSION_DENIED, f"{info.name}: default action is const")
        if entry.action.WhichOneof("type") != "action":
            raise invalid(f"{info.name}: the default entry needs a direct action")
        table.default_action = self._action_call(entry.action.action, info.action_ids, info.name)
        table.default_proto = p4r.TableEntry()
        table.default_proto.CopyFrom(entry)

    def _write_table_entry(self, kind: int, entry: p4r.TableEntry) -> None:
        table = self._table(entry.table_id)
        info = table.info
        if entry.is_default_action:
            self._write_default_entry(kind, table, entry)
            return
        fields, prefix_len = self._match(info, entry)
        if info.needs_priority:
            if entry.priority <= 0:
                raise invalid(f"{info.name}: entries of a ternary table need a priority > 0")
        elif entry.priority != 0:
            raise invalid(f"{info.name}: priority must be 0 for a table without ternary fields")
        key = (fields, entry.priority)
        if kind == p4r.Update.DELETE:
            if key not in table.entries:
                raise not_found(f"{info.name}: no such entry to delete")
            del table.entries[key]
            table.reindex()
            return
        action = member_id = group_id = None
        which = entry.action.WhichOneof("type")
        if info.implementation_id:
            profile = self.profiles[info.implementation_id]
            if which == "action_profile_member_id":
                member_id = entry.action.action_profile_member_id
                if member_id not in profile.members:
                    raise not_found(f"{info.name}: action profile member {member_id} does not exist")
            elif which == "action_profile_group_id":
                group_id = entry.action.action_profile_group_id
                if group_id not in profile.groups:
                    raise not_found(f"{info.name}: action profile group {group_id} does not exist")
            else:
                raise invalid(f"{info.name}: an indirect table needs a member or group id, got {which}")
        else:
            if which != "action":
                raise invalid(f"{info.name}: a direct table needs an action, got {which}")
            action = self._action_call(entry.action.action, info.action_ids, info.name)
            if action.action_id in info.default_only_action_ids:
                raise invalid(f"{info.name}: action {action.name} is for the default entry only")
        if kind == p4r.Update.INSERT:
            if key in table.entries:
                raise exists(f"{info.name}: an entry with this match key already exists")
            if len(table.entries) >= info.size:
                raise exhausted(f"{info.name}: table is full ({info.size} entries)")
        elif kind == p4r.Update.MODIFY:
            if key not in table.entries:
                raise not_found(f"{info.name}: no such entry to modify")
        stored = p4r.TableEntry()
        stored.CopyFrom(entry)
        table.entries[key] = TableEntryState(key, entry.priority, fields, prefix_len, action, member_id,
                                             group_id, stored)
        table.reindex()

    def _profile(self, profile_id: int) -> tuple[ActionProfileState, frozenset[int], str]:
        info = self.schema.action_profiles.get(profile_id)
        if info is None:
            raise not_found(f"unknown action profile id {profile_id}")
        allowed: set[int] = set()
        for tid in info.table_ids:
            allowed |= self.schema.tables[tid].action_ids
        return self.profiles[profile_id], frozenset(allowed), info.name

    def _member_in_use(self, profile_id: int, member_id: int) -> bool:
        profile = self.profiles[profile_id]
        if any(m.member_id == member_id for members, _ in profile.groups.values() for m in members):
            return True
        return any(
            e.member_id == member_id
            for t in self.tables.values() if t.info.implementation_id == profile_id
            for e in t.entries.values()
        )

    def _write_member(self, kind: int, member: p4r.ActionProfileMember) -> None:
        profile, allowed, name = self._profile(member.action_profile_id)
        mid = member.member_id
        _check_presence(kind, mid in profile.members, f"{name}: member {mid}")
        if kind == p4r.Update.DELETE:
            if self._member_in_use(member.action_profile_id, mid):
                raise P4RuntimeError(grpc.StatusCode.FAILED_PRECONDITION, f"{name}: member {mid} is in use")
            del profile.members[mid]
            return
        size = self.schema.action_profiles[member.action_profile_id].size
        if kind == p4r.Update.INSERT and size and len(profile.members) >= size:
            raise exhausted(f"{name}: action profile is full ({size} members)")
        call = self._action_call(member.action, allowed, f"{name} member {mid}")
        stored = p4r.ActionProfileMember()
        stored.CopyFrom(member)
        profile.members[mid] = (call, stored)

    def _write_group(self, kind: int, group: p4r.ActionProfileGroup) -> None:
        profile, _, name = self._profile(group.action_profile_id)
        info = self.schema.action_profiles[group.action_profile_id]
        gid = group.group_id
        if not info.with_selector:
            raise invalid(f"{name}: groups need an action selector")
        _check_presence(kind, gid in profile.groups, f"{name}: group {gid}")
        if kind == p4r.Update.DELETE:
            in_use = any(e.group_id == gid for t in self.tables.values()
                         if t.info.implementation_id == group.action_profile_id for e in t.entries.values())
            if in_use:
                raise P4RuntimeError(grpc.StatusCode.FAILED_PRECONDITION, f"{name}: group {gid} is in use")
            del profile.groups[gid]
            return
        limit = group.max_size or info.max_group_size
        if limit and len(group.members) > limit:
            raise exhausted(f"{name}: group {gid} has {len(group.members)} members, max {limit}")
        members = []
        listed: set[int] = set()
        for m in group.members:
            if m.member_id in listed:
                raise invalid(f"{name}: group {gid} lists member {m.member_id} twice")
            listed.add(m.member_id)
            if m.member_id not in profile.members:
                raise not_found(f"{name}: group {gid} references missing member {m.member_id}")
            if m.weight < 0:
                raise invalid(f"{name}: group {gid} member {m.member_id} has negative weight")
            watch = None
            if m.WhichOneof("watch_kind") == "watch_port":
                watch = int.from_bytes(m.watch_port, "big")
            elif m.WhichOneof("watch_kind") == "watch":
                watch = m.watch
            members.append(GroupMember(m.member_id, m.weight or 1, watch))
        stored = p4r.ActionProfileGroup()
        stored.CopyFrom(group)
        profile.groups[gid] = (tuple(members), stored)

    def _write_counter(self, kind: int, entry: p4r.CounterEntry) -> None:
        counter = self.counters.get(entry.counter_id)
        if counter is None:
            raise not_found(f"unknown counter id {entry.counter_id}")
        if kind != p4r.Update.MODIFY:
            raise invalid("counter entries can only be modified")
        self.sync_counters()
        indices = [entry.index.index] if entry.HasField("index") else range(counter.size)
        for i in indices:
            if not 0 <= i < counter.size:
                raise out_of_range(f"counter index {i} out of range 0..{counter.size - 1}")
        for i in indices:
            counter.packets[i] = entry.data.packet_count
            counter.bytes[i] = entry.data.byte_count

    def _write_pre(self, kind: int, entry: p4r.PacketReplicationEngineEntry) -> None:
        if entry.WhichOneof("type") != "clone_session_entry":
            raise unimplemented("only clone sessions are supported in the packet replication engine")
        session = entry.clone_session_entry
        sid = session.session_id
        _check_presence(kind, sid in self.clone_sessions, f"clone session {sid}")
        if kind == p4r.Update.DELETE:
            del self.clone_sessions[sid]
            return
        stored = p4r.CloneSessionEntry()
        stored.CopyFrom(session)
        self.clone_sessions[sid] = stored

    # ---- reads (softswitch/reads.py) -------------------------------------------------------------
    def read(self, entity: p4r.Entity) -> Iterator[p4r.Entity]:
        with self.lock:
            yield from read_entities(self, entity)

    def sync_counters(self) -> None:
        with self.lock:
            for sync in self.counter_sync:
                sync()

    def clear(self) -> None:
        """Forget all runtime state (a new pipeline was committed)."""
        with self.lock:
            listeners, counter_sync = self.listeners, self.counter_sync
            self.__init__(self.schema)  # type: ignore[misc]
            self.listeners, self.counter_sync = listeners, counter_sync
        for listener in self.listeners:
            listener()
