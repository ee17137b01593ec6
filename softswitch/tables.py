"""The soft switch's runtime state as data: table entries and their lookup, action profile members
and groups, counters. softswitch/runtime_state.py writes them (validated against the P4Info), the
pipeline reads them per frame, softswitch/reads.py answers P4Runtime Reads from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from wire.p4info import TableInfo
from wire.proto import p4r


@dataclass(frozen=True)
class ActionCall:
    """An action with its parameter values, in P4Info parameter order."""

    action_id: int
    name: str
    args: tuple[int, ...]


@dataclass(frozen=True)
class GroupMember:
    member_id: int
    weight: int
    watch_port: int | None


@dataclass
class TableEntryState:
    key: tuple
    priority: int
    fields: tuple[tuple[int, int], ...]  # (value, mask) per P4Info match field, (0, 0) = wildcard
    prefix_len: int
    action: ActionCall | None
    member_id: int | None
    group_id: int | None
    proto: p4r.TableEntry


@dataclass
class TableState:
    info: TableInfo
    default_action: ActionCall
    default_proto: p4r.TableEntry
    entries: dict[tuple, TableEntryState] = field(default_factory=dict)
    exact_index: dict[tuple[int, ...], TableEntryState] = field(default_factory=dict)
    ordered: list[TableEntryState] = field(default_factory=list)

    @property
    def all_exact(self) -> bool:
        return all(f.kind == "exact" for f in self.info.match_fields)

    def reindex(self) -> None:
        if self.all_exact:
            self.exact_index = {tuple(v for v, _ in e.fields): e for e in self.entries.values()}
        else:
            self.ordered = sorted(self.entries.values(), key=lambda e: (e.priority, e.prefix_len), reverse=True)

    def lookup(self, values: tuple[int, ...]) -> TableEntryState | None:
        """Match `values` (one per match field, P4Info order); None means a miss."""
        if self.all_exact:
            return self.exact_index.get(values)
        for entry in self.ordered:
            for (value, mask), field_value in zip(entry.fields, values, strict=True):
                if field_value & mask != value:
                    break
            else:
                return entry
        return None


@dataclass
class ActionProfileState:
    members: dict[int, tuple[ActionCall, p4r.ActionProfileMember]] = field(default_factory=dict)
    groups: dict[int, tuple[tuple[GroupMember, ...], p4r.ActionProfileGroup]] = field(default_factory=dict)


@dataclass
class CounterState:
    size: int
    packets: list[int]
    bytes: list[int]
