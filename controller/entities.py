"""Build P4Runtime entities by P4Info name (tables, actions, params, members, groups, clone sessions,
parser value sets)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from wire.p4info import P4Schema, encode_value
from wire.proto import p4r

MatchValue = int | str | tuple[int | str, int]


def _int(value: int | str) -> int:
    if isinstance(value, int):
        return value
    if ":" in value and value.count(":") == 5:
        return int(value.replace(":", ""), 16)
    return int(ipaddress.IPv4Address(value))


def action(schema: P4Schema, name: str, **params: int | str) -> p4r.Action:
    info = schema.action(name)
    message = p4r.Action(action_id=info.id)
    missing = {p.name for p in info.params} - set(params)
    if missing:
        raise ValueError(f"action {name}: missing parameter(s) {sorted(missing)}")
    for key, value in params.items():
        param = info.param_by_name(key)
        message.params.add(param_id=param.id, value=encode_value(_int(value), param.bitwidth))
    return message


def table_entry(schema: P4Schema, table: str, match: Mapping[str, MatchValue], *,
                action_call: p4r.Action | None = None, member_id: int | None = None,
                group_id: int | None = None, priority: int = 0) -> p4r.TableEntry:
    """match values: exact → int/str; lpm → (value, prefix_len); ternary → (value, mask)."""
    info = schema.table(table)
    entry = p4r.TableEntry(table_id=info.id, priority=priority)
    fields = {f.name: f for f in info.match_fields}
    for name, value in match.items():
        if name not in fields:
            raise ValueError(f"table {table}: no match field {name!r}")
        f = fields[name]
        fm = entry.match.add(field_id=f.id)
        if f.kind == "exact":
            if isinstance(value, tuple):
                raise ValueError(f"table {table}: {name} is an exact match, got a pair {value!r}")
            fm.exact.value = encode_value(_int(value), f.bitwidth)
        elif f.kind in ("lpm", "ternary"):
            if not isinstance(value, tuple):
                raise ValueError(f"table {table}: {name} ({f.kind}) takes a pair, got {value!r}")
            v, second = value
            if f.kind == "lpm":
                fm.lpm.value = encode_value(_int(v), f.bitwidth)
                fm.lpm.prefix_len = second
            else:
                fm.ternary.value = encode_value(_int(v), f.bitwidth)
                fm.ternary.mask = encode_value(_int(second), f.bitwidth)
        else:
            raise ValueError(f"table {table}: match kind {f.kind} not supported here")
    if action_call is not None:
        entry.action.action.CopyFrom(action_call)
    elif member_id is not None:
        entry.action.action_profile_member_id = member_id
    elif group_id is not None:
        entry.action.action_profile_group_id = group_id
    return entry


def default_entry(schema: P4Schema, table: str, action_call: p4r.Action) -> p4r.TableEntry:
    entry = p4r.TableEntry(table_id=schema.id_of(table), is_default_action=True)
    entry.action.action.CopyFrom(action_call)
    return entry


def member(schema: P4Schema, profile: str, member_id: int, action_call: p4r.Action) -> p4r.ActionProfileMember:
    return p4r.ActionProfileMember(action_profile_id=schema.id_of(profile), member_id=member_id,
                                   action=action_call)


def group(schema: P4Schema, profile: str, group_id: int,
          members: Sequence[tuple[int, int]], max_size: int = 0) -> p4r.ActionProfileGroup:
    """members: (member_id, watch_port) pairs, weight 1 each."""
    message = p4r.ActionProfileGroup(action_profile_id=schema.id_of(profile), group_id=group_id,
                                     max_size=max_size)
    for member_id, watch_port in members:
        message.members.add(member_id=member_id, weight=1, watch_port=encode_value(watch_port, 16))
    return message


def clone_session(session_id: int, port: int, packet_length_bytes: int = 0) -> p4r.CloneSessionEntry:
    message = p4r.CloneSessionEntry(session_id=session_id, packet_length_bytes=packet_length_bytes)
    message.replicas.add(port=encode_value(port, 32), instance=1)
    return message


def value_set(schema: P4Schema, name: str, values: Sequence[int]) -> p4r.ValueSetEntry:
    """The whole contents of a parser value set (written with MODIFY: P4Runtime allows no other)."""
    info = schema.value_set(name)
    message = p4r.ValueSetEntry(value_set_id=info.id)
    for value in values:
        message.members.add().match.add(field_id=1).exact.value = encode_value(value, info.bitwidth)
    return message


def update(kind: p4r.Update.Type.ValueType, entity: object) -> p4r.Update:
    message = p4r.Update(type=kind)
    if isinstance(entity, p4r.TableEntry):
        message.entity.table_entry.CopyFrom(entity)
    elif isinstance(entity, p4r.ActionProfileMember):
        message.entity.action_profile_member.CopyFrom(entity)
    elif isinstance(entity, p4r.ActionProfileGroup):
        message.entity.action_profile_group.CopyFrom(entity)
    elif isinstance(entity, p4r.CloneSessionEntry):
        message.entity.packet_replication_engine_entry.clone_session_entry.CopyFrom(entity)
    elif isinstance(entity, p4r.CounterEntry):
        message.entity.counter_entry.CopyFrom(entity)
    elif isinstance(entity, p4r.ValueSetEntry):
        message.entity.value_set_entry.CopyFrom(entity)
    else:
        raise TypeError(f"cannot wrap {type(entity).__name__} in an Update")
    return message


def insert(entity: object) -> p4r.Update:
    return update(p4r.Update.INSERT, entity)


def modify(entity: object) -> p4r.Update:
    return update(p4r.Update.MODIFY, entity)


def delete(entity: object) -> p4r.Update:
    return update(p4r.Update.DELETE, entity)
