"""Loading a P4Info and looking its objects up by name.

Every component resolves tables, actions, counters and packet metadata through this module,
so the committed P4Info (p4src/starnet.p4info.txtpb) is the only list of names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from wire.proto import p4i

DEFAULT_P4INFO = Path(__file__).resolve().parent.parent / "p4src" / "starnet.p4info.txtpb"

MATCH_KINDS = {
    p4i.MatchField.EXACT: "exact",
    p4i.MatchField.LPM: "lpm",
    p4i.MatchField.TERNARY: "ternary",
    p4i.MatchField.RANGE: "range",
    p4i.MatchField.OPTIONAL: "optional",
}


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    kind: str


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]

    def param_by_name(self, name: str) -> ParamInfo:
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(f"action {self.name} has no parameter {name!r}")


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    match_fields: tuple[MatchFieldInfo, ...]
    action_ids: frozenset[int]
    default_only_action_ids: frozenset[int]
    implementation_id: int
    size: int
    const_default_action_id: int

    @property
    def needs_priority(self) -> bool:
        return any(f.kind in ("ternary", "range", "optional") for f in self.match_fields)


@dataclass(frozen=True)
class ActionProfileInfo:
    id: int
    name: str
    table_ids: tuple[int, ...]
    with_selector: bool
    size: int
    max_group_size: int


@dataclass(frozen=True)
class CounterInfo:
    id: int
    name: str
    size: int
    unit: str


@dataclass(frozen=True)
class ValueSetInfo:
    """A parser value set: its members are matched as one exact field of `bitwidth` bits."""

    id: int
    name: str
    bitwidth: int
    size: int


@dataclass(frozen=True)
class PacketMetadataInfo:
    id: int
    name: str
    fields: tuple[ParamInfo, ...]


@dataclass
class P4Schema:
    """Name and id indexes over one P4Info message."""

    p4info: p4i.P4Info
    tables: dict[int, TableInfo] = field(default_factory=dict)
    actions: dict[int, ActionInfo] = field(default_factory=dict)
    action_profiles: dict[int, ActionProfileInfo] = field(default_factory=dict)
    counters: dict[int, CounterInfo] = field(default_factory=dict)
    value_sets: dict[int, ValueSetInfo] = field(default_factory=dict)
    packet_metadata: dict[str, PacketMetadataInfo] = field(default_factory=dict)
    _ids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_message(cls, p4info: p4i.P4Info) -> P4Schema:
        schema = cls(p4info)
        for t in p4info.tables:
            schema.tables[t.preamble.id] = TableInfo(
                id=t.preamble.id,
                name=t.preamble.name,
                match_fields=tuple(
                    MatchFieldInfo(m.id, m.name, m.bitwidth, MATCH_KINDS.get(m.match_type, "?"))
                    for m in t.match_fields
                ),
                action_ids=frozenset(a.id for a in t.action_refs),
                default_only_action_ids=frozenset(
                    a.id for a in t.action_refs if a.scope == p4i.ActionRef.DEFAULT_ONLY
                ),
                implementation_id=t.implementation_id,
                size=t.size,
                const_default_action_id=t.const_default_action_id,
            )
        for a in p4info.actions:
            schema.actions[a.preamble.id] = ActionInfo(
                a.preamble.id,
                a.preamble.name,
                tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params),
            )
        for ap in p4info.action_profiles:
            schema.action_profiles[ap.preamble.id] = ActionProfileInfo(
                ap.preamble.id,
                ap.preamble.name,
                tuple(ap.table_ids),
                ap.with_selector,
                ap.size,
                ap.max_group_size,
            )
        for c in p4info.counters:
            unit = p4i.CounterSpec.Unit.Name(c.spec.unit)
            schema.counters[c.preamble.id] = CounterInfo(c.preamble.id, c.preamble.name, c.size, unit)
        for v in p4info.value_sets:
            schema.value_sets[v.preamble.id] = ValueSetInfo(v.preamble.id, v.preamble.name,
                                                            sum(m.bitwidth for m in v.match), v.size)
        for cpm in p4info.controller_packet_metadata:
            schema.packet_metadata[cpm.preamble.name] = PacketMetadataInfo(
                cpm.preamble.id,
                cpm.preamble.name,
                tuple(ParamInfo(m.id, m.name, m.bitwidth) for m in cpm.metadata),
            )
        for group in (schema.tables, schema.actions, schema.action_profiles, schema.counters, schema.value_sets):
            for obj in group.values():
                schema._ids[obj.name] = obj.id
        return schema

    @classmethod
    def load(cls, path: Path | str = DEFAULT_P4INFO) -> P4Schema:
        return cls.from_message(load_p4info(path))

    def id_of(self, name: str) -> int:
        try:
            return self._ids[name]
        except KeyError:
            raise KeyError(f"P4Info has no object named {name!r}") from None

    def table(self, name: str) -> TableInfo:
        return self.tables[self.id_of(name)]

    def action(self, name: str) -> ActionInfo:
        return self.actions[self.id_of(name)]

    def action_profile(self, name: str) -> ActionProfileInfo:
        return self.action_profiles[self.id_of(name)]

    def counter(self, name: str) -> CounterInfo:
        return self.counters[self.id_of(name)]

    def value_set(self, name: str) -> ValueSetInfo:
        return self.value_sets[self.id_of(name)]

    def metadata(self, header: str) -> PacketMetadataInfo:
        try:
            return self.packet_metadata[header]
        except KeyError:
            raise KeyError(f"P4Info has no controller header {header!r}") from None


def load_p4info(path: Path | str = DEFAULT_P4INFO) -> p4i.P4Info:
    message = p4i.P4Info()
    text_format.Parse(Path(path).read_text(), message)
    return message


def encode_value(value: int, bitwidth: int) -> bytes:
    """P4Runtime canonical bytestring: big-endian, no leading zero bytes (0 is one zero byte)."""
    if value < 0 or value >= (1 << bitwidth):
        raise ValueError(f"value {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


class BitwidthError(ValueError):
    """A bytestring whose value does not fit its bitwidth (P4Runtime spec §8.3: OUT_OF_RANGE)."""


def decode_value(data: bytes, bitwidth: int, what: str) -> int:
    """Integer of a P4Runtime bytestring; ValueError naming `what` if empty, BitwidthError if the
    value exceeds `bitwidth`."""
    if not data:
        raise ValueError(f"{what}: empty bytestring")
    value = int.from_bytes(data, "big")
    if value >= (1 << bitwidth):
        raise BitwidthError(f"{what}: value 0x{data.hex()} does not fit in {bitwidth} bits")
    return value
