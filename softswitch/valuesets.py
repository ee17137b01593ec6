"""Parser value sets of a soft switch (starnet.p4's StarParser.int_dscp), written and read over P4Runtime.

P4Runtime's ValueSetEntry: a write replaces the whole set and only MODIFY is allowed (INSERT and
DELETE are INVALID_ARGUMENT); an unknown id is NOT_FOUND; more members than the set's size is
RESOURCE_EXHAUSTED; each member is one exact match of the set's width (a value beyond it is
OUT_OF_RANGE, a missing or other kind of match INVALID_ARGUMENT); a duplicate member is kept once.
A read of id 0 returns every set, with the members as written. An empty set is never matched.
"""

from __future__ import annotations

from collections.abc import Iterator

from softswitch.errors import exhausted, invalid, not_found, value_error
from wire.p4info import P4Schema, ValueSetInfo, decode_value
from wire.proto import p4r


class ValueSets:
    """The members of every parser value set, as values and as the last written message."""

    def __init__(self, schema: P4Schema) -> None:
        self.info: dict[int, ValueSetInfo] = dict(schema.value_sets)
        self.members: dict[int, frozenset[int]] = {vs: frozenset() for vs in self.info}
        self.protos: dict[int, p4r.ValueSetEntry] = {vs: p4r.ValueSetEntry(value_set_id=vs) for vs in self.info}

    def by_name(self, name: str) -> frozenset[int]:
        for vs, info in self.info.items():
            if info.name == name:
                return self.members[vs]
        raise KeyError(f"P4Info has no value set named {name!r}")

    def write(self, kind: p4r.Update.Type.ValueType, entry: p4r.ValueSetEntry) -> None:
        """Validate all of `entry`, then replace the set; raise P4RuntimeError and change nothing."""
        if kind != p4r.Update.MODIFY:
            raise invalid(f"value set {entry.value_set_id}: only MODIFY writes a value set, not "
                          f"{p4r.Update.Type.Name(kind)}")
        info = self.info.get(entry.value_set_id)
        if info is None:
            raise not_found(f"unknown value set id {entry.value_set_id}")
        if len(entry.members) > info.size:
            raise exhausted(f"value set {info.name}: {len(entry.members)} members, its size is {info.size}")
        values = set()
        for member in entry.members:
            if len(member.match) != 1 or member.match[0].field_id != 1 or \
                    member.match[0].WhichOneof("field_match_type") != "exact":
                raise invalid(f"value set {info.name}: a member is one exact match of field 1")
            try:
                values.add(decode_value(member.match[0].exact.value, info.bitwidth, f"{info.name} member"))
            except ValueError as exc:
                raise value_error(exc) from None
        self.members[info.id] = frozenset(values)
        self.protos[info.id] = p4r.ValueSetEntry()
        self.protos[info.id].CopyFrom(entry)

    def read(self, query: p4r.ValueSetEntry) -> Iterator[p4r.Entity]:
        if query.members:
            raise invalid("a value set read names no members")
        if query.value_set_id and query.value_set_id not in self.info:
            raise not_found(f"unknown value set id {query.value_set_id}")
        for vs in [query.value_set_id] if query.value_set_id else list(self.info):
            out = p4r.Entity()
            out.value_set_entry.CopyFrom(self.protos[vs])
            yield out
