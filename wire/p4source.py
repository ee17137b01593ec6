"""Read the control-plane surface of a P4-16 v1model program and compare it with a P4Info.

This is not a P4 compiler: it reads the declarations a P4Info is made of — header and struct
types, typedefs, and in each control its actions, tables (keys, actions, implementation, size),
counters, registers and action selectors, in each parser its value sets, plus @controller_header
types — from the source, with
includes resolved. `compare(program, p4info)` lists every name, width, match kind, size or
parameter that differs, so the committed P4Info and the program cannot drift apart unnoticed
(ids are not compared: everything resolves ids by name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from wire.proto import p4i

# v1model standard_metadata_t fields a table may match on.
STANDARD_METADATA_BITS = {
    "ingress_port": 9, "egress_spec": 9, "egress_port": 9, "instance_type": 32, "packet_length": 32,
    "enq_timestamp": 32, "enq_qdepth": 19, "deq_timedelta": 32, "deq_qdepth": 19,
    "ingress_global_timestamp": 48, "egress_global_timestamp": 48, "mcast_grp": 16, "egress_rid": 16,
    "checksum_error": 1, "priority": 3,
}
MATCH_KINDS = {"exact": p4i.MatchField.EXACT, "lpm": p4i.MatchField.LPM, "ternary": p4i.MatchField.TERNARY,
               "range": p4i.MatchField.RANGE, "optional": p4i.MatchField.OPTIONAL}
COUNTER_UNITS = {"packets": p4i.CounterSpec.PACKETS, "bytes": p4i.CounterSpec.BYTES,
                 "packets_and_bytes": p4i.CounterSpec.BOTH}


class P4SourceError(ValueError):
    """The program uses a construct this reader does not understand; the message says which."""


@dataclass
class TableDecl:
    name: str
    keys: list[tuple[str, str]] = field(default_factory=list)  # (expression, match kind)
    actions: list[tuple[str, bool]] = field(default_factory=list)  # (action name, default only)
    implementation: str | None = None
    size: int | None = None


@dataclass
class Program:
    types: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # header/struct → [(type, field)]
    typedefs: dict[str, str] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)
    controller_headers: dict[str, str] = field(default_factory=dict)  # controller name → header type
    actions: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # qualified name → params
    tables: dict[str, TableDecl] = field(default_factory=dict)
    counters: dict[str, tuple[int, str]] = field(default_factory=dict)  # name → (size, unit)
    registers: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (bitwidth, size)
    selectors: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (size, max group size)
    value_sets: dict[str, tuple[int, int]] = field(default_factory=dict)  # name → (bitwidth, size)
    called_actions: set[str] = field(default_factory=set)  # actions an apply block calls (p4c lists them)
    control_params: dict[str, dict[str, str]] = field(default_factory=dict)

    def width(self, type_name: str) -> int:
        type_name = self.typedefs.get(type_name, type_name).strip()
        match = re.fullmatch(r"bit\s*<\s*(\w+)\s*>", type_name)
        if match:
            return self._int(match.group(1))
        if type_name == "bool":
            return 1
        raise P4SourceError(f"no bit width for type {type_name!r}")

    def _int(self, token: str) -> int:
        token = token.strip()
        if token in self.constants:
            return self.constants[token]
        match = re.fullmatch(r"(?:\d+w)?(0x[0-9a-fA-F]+|\d+)", token)
        if not match:
            raise P4SourceError(f"not an integer constant: {token!r}")
        return int(match.group(1), 0)

    def expression_width(self, control: str, expression: str) -> int:
        """Bit width of a key expression such as hdr.ipv4.dst_addr or standard_metadata.ingress_port."""
        parts = expression.split(".")
        params = self.control_params.get(control, {})
        type_name = params.get(parts[0])
        if type_name is None:
            raise P4SourceError(f"{control}: key {expression!r} does not start with a control parameter")
        if type_name == "standard_metadata_t":
            if len(parts) != 2 or parts[1] not in STANDARD_METADATA_BITS:
                raise P4SourceError(f"{control}: unknown standard_metadata field in {expression!r}")
            return STANDARD_METADATA_BITS[parts[1]]
        for part in parts[1:]:
            fields = dict((name, typ) for typ, name in self.types.get(type_name, []))
            if part not in fields:
                raise P4SourceError(f"{control}: {type_name} has no field {part!r} (key {expression!r})")
            type_name = fields[part]
        return self.width(type_name)


def read_source(path: Path, seen: set[Path] | None = None) -> str:
    """The program text with local #includes inlined and comments and preprocessor lines removed."""
    seen = seen if seen is not None else set()
    path = path.resolve()
    if path in seen:
        return ""
    seen.add(path)
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    out = []
    for line in text.splitlines():
        line = re.sub(r"//.*", "", line)
        include = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if include:
            out.append(read_source(path.parent / include.group(1), seen))
        elif not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out)


def _block(text: str, start: int) -> tuple[str, int]:
    """The text inside the brace block opening at or after `start`, and the index after it."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i], i + 1
    raise P4SourceError("unbalanced braces")


def _top_level(body: str) -> str:
    """`body` with every nested brace block blanked out, so only its own declarations remain."""
    out, depth = [], 0
    for ch in body:
        if ch == "{":
            depth += 1
            out.append("{" if depth == 1 else " ")
        elif ch == "}":
            out.append("}" if depth == 1 else " ")
            depth -= 1
        else:
            out.append(ch if depth == 0 else " ")
    return "".join(out)


def parse_program(path: Path) -> Program:
    text = read_source(path)
    program = Program()
    for match in re.finditer(r"\bconst\s+[\w<>\s]+?\s+(\w+)\s*=\s*([\w]+)\s*;", text):
        try:
            program.constants[match.group(1)] = program._int(match.group(2))
        except P4SourceError:
            pass
    for match in re.finditer(r"\btypedef\s+(bit\s*<\s*\w+\s*>)\s+(\w+)\s*;", text):
        program.typedefs[match.group(2)] = match.group(1)
    for match in re.finditer(r"((?:@\w+(?:\([^)]*\))?\s*)*)\b(header|struct)\s+(\w+)\s*\{", text):
        body, _ = _block(text, match.start(3))
        fields = []
        for decl in body.split(";"):
            decl = re.sub(r"@\w+(\([^)]*\))?", "", decl).strip()
            if decl:
                typ, name = decl.rsplit(None, 1)
                fields.append((re.sub(r"\s*\[\s*\w+\s*\]", "", typ), name))
        program.types[match.group(3)] = fields
        controller = re.search(r'@controller_header\(\s*"(\w+)"\s*\)', match.group(1))
        if controller:
            program.controller_headers[controller.group(1)] = match.group(3)
    for match in re.finditer(r"\bcontrol\s+(\w+)\s*\(([^)]*)\)\s*\{", text):
        control = match.group(1)
        params = {}
        for param in match.group(2).split(","):
            words = param.split()
            if len(words) >= 2:
                params[words[-1]] = words[-2]
        program.control_params[control] = params
        body, _ = _block(text, match.end() - 1)
        _parse_control(program, control, body)
    for match in re.finditer(r"\bparser\s+(\w+)\s*\([^)]*\)\s*\{", text):
        body, _ = _block(text, match.end() - 1)
        for vs in re.finditer(r"\bvalue_set\s*<\s*(bit\s*<\s*\w+\s*>|\w+)\s*>\s*\(\s*(\w+)\s*\)\s*(\w+)\s*;",
                              _top_level(body)):
            program.value_sets[f"{match.group(1)}.{vs.group(3)}"] = (program.width(vs.group(1)),
                                                                    program._int(vs.group(2)))
    return program


def _parse_control(program: Program, control: str, body: str) -> None:
    top = _top_level(body)
    for match in re.finditer(r"\baction\s+(\w+)\s*\(([^)]*)\)\s*\{", top):
        params = []
        for param in filter(None, (p.strip() for p in match.group(2).split(","))):
            typ, name = param.rsplit(None, 1)
            params.append((name, program.width(typ)))
        program.actions[f"{control}.{match.group(1)}"] = params
    apply = re.search(r"\bapply\s*\{", top)
    if apply:
        apply_body, _ = _block(body, apply.end() - 1)  # _top_level keeps positions
        for name in [a for a in program.actions if a.startswith(f"{control}.")]:
            if re.search(rf"\b{re.escape(name.split('.', 1)[1])}\s*\(", apply_body):
                program.called_actions.add(name)
    for match in re.finditer(r"\btable\s+(\w+)\s*\{", top):
        table_body, _ = _block(body, match.end() - 1)
        program.tables[f"{control}.{match.group(1)}"] = _parse_table(program, control, match.group(1), table_body)
    for match in re.finditer(r"\bcounter\s*\(\s*(\w+)\s*,\s*CounterType\.(\w+)\s*\)\s*(\w+)\s*;", top):
        program.counters[f"{control}.{match.group(3)}"] = (program._int(match.group(1)), match.group(2))
    for match in re.finditer(r"\bregister\s*<\s*(bit\s*<\s*\w+\s*>|\w+)\s*>\s*\(\s*(\w+)\s*\)\s*(\w+)\s*;", top):
        program.registers[f"{control}.{match.group(3)}"] = (program.width(match.group(1)),
                                                            program._int(match.group(2)))
    for match in re.finditer(r"((?:@\w+\([^)]*\)\s*)*)\baction_selector\s*\(\s*HashAlgorithm\.\w+\s*,\s*(\w+)\s*,"
                             r"\s*(\w+)\s*\)\s*(\w+)\s*;", top):
        group = re.search(r"@max_group_size\(\s*(\w+)\s*\)", match.group(1))
        program.selectors[f"{control}.{match.group(4)}"] = (program._int(match.group(2)),
                                                            program._int(group.group(1)) if group else 0)


def _parse_table(program: Program, control: str, name: str, body: str) -> TableDecl:
    table = TableDecl(f"{control}.{name}")
    key = re.search(r"\bkey\s*=\s*\{", body)
    if key:
        key_body, _ = _block(body, key.end() - 1)
        for entry in filter(None, (e.strip() for e in key_body.split(";"))):
            expression, kind = (s.strip() for s in entry.rsplit(":", 1))
            table.keys.append((expression, kind))
    actions = re.search(r"\bactions\s*=\s*\{", body)
    if actions:
        actions_body, _ = _block(body, actions.end() - 1)
        for entry in filter(None, (e.strip() for e in actions_body.split(";"))):
            default_only = "@defaultonly" in entry
            action = re.sub(r"@\w+(\([^)]*\))?", "", entry).strip()
            table.actions.append((action, default_only))
    implementation = re.search(r"\bimplementation\s*=\s*(\w+)\s*;", body)
    table.implementation = f"{control}.{implementation.group(1)}" if implementation else None
    size = re.search(r"\bsize\s*=\s*(\w+)\s*;", body)
    table.size = program._int(size.group(1)) if size else None
    return table


def _qualify(control: str, action: str, program: Program) -> str:
    local = f"{control}.{action}"
    return local if local in program.actions else action


def _compare_table(program: Program, name: str, info: p4i.Table, actions_by_id: dict, profiles: dict,
                   used_actions: set[str]) -> list[str]:
    """The differences of one table (match fields, actions, implementation, size); the actions it
    uses are added to used_actions."""
    problems: list[str] = []
    decl = program.tables[name]
    control = name.split(".")[0]
    keys = [(expr, kind) for expr, kind in decl.keys if kind != "selector"]
    have = [(f.name, f.bitwidth, p4i.MatchField.MatchType.Name(f.match_type).lower()) for f in info.match_fields]
    try:
        want = [(expr, program.expression_width(control, expr), kind) for expr, kind in keys]
    except P4SourceError as exc:
        problems.append(f"table {name}: {exc}")
    else:
        if want != have:
            problems.append(f"table {name}: match fields {want} in the program, {have} in the P4Info")
    want_actions = sorted((_qualify(control, a, program), d) for a, d in decl.actions)
    have_actions = sorted((actions_by_id[r.id].preamble.name if r.id in actions_by_id else f"id {r.id}",
                           r.scope == p4i.ActionRef.DEFAULT_ONLY) for r in info.action_refs)
    if want_actions != have_actions:
        problems.append(f"table {name}: actions {want_actions} in the program, {have_actions} in the P4Info")
    used_actions.update(a for a, _ in want_actions)
    have_impl = profiles[info.implementation_id].preamble.name if info.implementation_id in profiles else None
    if decl.implementation != have_impl:
        problems.append(f"table {name}: implementation {decl.implementation} in the program, "
                        f"{have_impl} in the P4Info")
    if decl.size is not None and decl.size != info.size:
        problems.append(f"table {name}: size {decl.size} in the program, {info.size} in the P4Info")
    return problems


def compare(program: Program, p4info: p4i.P4Info) -> list[str]:
    """Every difference between the program's declarations and the P4Info, as readable lines."""
    problems: list[str] = []
    actions_by_id = {a.preamble.id: a for a in p4info.actions}
    tables = {t.preamble.name: t for t in p4info.tables}
    profiles = {p.preamble.id: p for p in p4info.action_profiles}
    for name in sorted(set(program.tables) ^ set(tables)):
        where = "program" if name in program.tables else "P4Info"
        problems.append(f"table {name} is only in the {where}")
    used_actions = {"NoAction"}
    for name in sorted(set(program.tables) & set(tables)):
        problems += _compare_table(program, name, tables[name], actions_by_id, profiles, used_actions)
    info_actions = {a.preamble.name: a for a in p4info.actions}
    # An action only called from apply blocks has its arguments bound at the call: p4c lists it
    # without parameters (the control plane cannot pass any).
    only_called = program.called_actions - used_actions
    used_actions |= program.called_actions
    for name in sorted(used_actions):
        if name not in info_actions:
            problems.append(f"action {name} is used by the program but missing from the P4Info")
            continue
        if name == "NoAction":
            continue
        want_params = [] if name in only_called else program.actions.get(name)
        have_params = [(p.name, p.bitwidth) for p in info_actions[name].params]
        if want_params is None:
            problems.append(f"action {name} is in the P4Info but not declared in the program")
        elif want_params != have_params:
            problems.append(f"action {name}: parameters {want_params} in the program, {have_params} in the P4Info")
    for name in sorted(set(info_actions) - used_actions):
        problems.append(f"action {name} is in the P4Info but the program uses it nowhere")
    counters = {c.preamble.name: (c.size, p4i.CounterSpec.Unit.Name(c.spec.unit)) for c in p4info.counters}
    want_counters = {n: (s, p4i.CounterSpec.Unit.Name(COUNTER_UNITS[u])) for n, (s, u) in program.counters.items()}
    problems += _diff("counter", want_counters, counters)
    registers = {r.preamble.name: (r.type_spec.bitstring.bit.bitwidth, r.size) for r in p4info.registers}
    problems += _diff("register", program.registers, registers)
    selectors = {p.preamble.name: (p.size, p.max_group_size) for p in p4info.action_profiles if p.with_selector}
    problems += _diff("action selector", program.selectors, selectors)
    value_sets = {v.preamble.name: (sum(m.bitwidth for m in v.match), v.size) for v in p4info.value_sets}
    problems += _diff("value set", program.value_sets, value_sets)
    metadata = {m.preamble.name: [(f.name, f.bitwidth) for f in m.metadata] for m in p4info.controller_packet_metadata}
    want_metadata = {name: [(f, program.width(t)) for t, f in program.types[header]]
                     for name, header in program.controller_headers.items()}
    problems += _diff("controller header", want_metadata, metadata)
    return problems


def _diff(what: str, program: dict, p4info: dict) -> list[str]:
    problems = []
    for name in sorted(set(program) | set(p4info)):
        if name not in p4info:
            problems.append(f"{what} {name} is only in the program")
        elif name not in program:
            problems.append(f"{what} {name} is only in the P4Info")
        elif program[name] != p4info[name]:
            problems.append(f"{what} {name}: {program[name]} in the program, {p4info[name]} in the P4Info")
    return problems
