"""starnet.p4 and its committed P4Info agree in every name, width, match kind and size (no p4c needed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wire.drops import DROP_REASONS
from wire.p4info import DEFAULT_P4INFO, P4Schema, load_p4info
from wire.p4source import compare, parse_program

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = ROOT / "p4src" / "starnet.p4"
GENERATED = ROOT / "build" / "starnet.p4info.txtpb"


@pytest.fixture(scope="module")
def program():
    return parse_program(PROGRAM)


def test_program_declares_the_designed_pipeline(program):
    assert {"StarIngress.port_role", "StarIngress.ipv4_lpm", "StarIngress.flow_pin", "StarIngress.flowlet_config",
            "StarIngress.int_source", "StarIngress.int_sink", "StarIngress.fault_inject", "StarEgress.port_config",
            "StarEgress.int_node"} == set(program.tables)
    lpm = program.tables["StarIngress.ipv4_lpm"]
    assert lpm.implementation == "StarIngress.ecmp_selector"
    assert [k for k in lpm.keys if k[1] == "selector"] == [
        ("hdr.ipv4.src_addr", "selector"), ("hdr.ipv4.protocol", "selector"),
        ("meta.l4_src_port", "selector"), ("meta.l4_dst_port", "selector"), ("meta.flowlet_id", "selector")]


def test_drop_reasons_are_the_programs_counter_indexes(program):
    """softswitch DROP_REASONS and starnet.p4's DROP_* constants: same names, same indexes, and the
    counter drop_reason has one cell per reason."""
    declared = {name[len("DROP_"):].lower(): value for name, value in program.constants.items()
                if name.startswith("DROP_") and name not in ("DROP_PORT", "DROP_REASONS")}
    assert declared == {reason: index for index, reason in enumerate(DROP_REASONS)}
    assert program.constants["DROP_REASONS"] == len(DROP_REASONS)
    size = [c.size for c in load_p4info().counters if c.preamble.name == "StarIngress.drop_reason"]
    assert size == [len(DROP_REASONS)]


def test_committed_p4info_matches_the_program(program):
    assert compare(program, load_p4info()) == []


@pytest.mark.skipif(not GENERATED.exists(), reason="no p4c output: build/starnet.p4info.txtpb appears after `make p4`")
def test_p4c_generated_p4info_matches_the_program(program):
    assert compare(program, load_p4info(GENERATED)) == []


def _ids(info) -> dict[str, int]:
    """name → id of every object with a preamble, by kind."""
    found = {}
    for kind in ("tables", "actions", "action_profiles", "counters", "registers", "controller_packet_metadata"):
        for item in getattr(info, kind):
            found[f"{kind} {item.preamble.name}"] = item.preamble.id
    return found


@pytest.mark.skipif(not GENERATED.exists(), reason="no p4c output: build/starnet.p4info.txtpb appears after `make p4`")
def test_p4c_assigns_the_committed_ids():
    """The committed P4Info is p4c's, ids included, so a P4Runtime client sees one program on
    either target (the soft switch serves the committed file, BMv2 p4c's)."""
    assert _ids(load_p4info(GENERATED)) == _ids(load_p4info())


def test_renamed_match_field_in_p4info_is_caught(program):
    info = load_p4info()
    table = [t for t in info.tables if t.preamble.name == "StarIngress.ipv4_lpm"][0]
    table.match_fields[0].name = "hdr.ipv4.dst"
    problems = compare(program, info)
    assert len(problems) == 1 and "StarIngress.ipv4_lpm" in problems[0] and "hdr.ipv4.dst" in problems[0]


@pytest.mark.parametrize("mutate, expected", [
    (lambda info: setattr([a for a in info.actions if a.preamble.name == "StarIngress.set_nhop"][0].params[0],
                          "bitwidth", 16), "action StarIngress.set_nhop: parameters"),
    (lambda info: info.counters.pop(0), "counter StarIngress.port_rx is only in the program"),
    (lambda info: setattr(info.controller_packet_metadata[0].metadata[1], "name", "cause"),
     "controller header packet_in"),
    (lambda info: setattr(info.registers[0], "size", 2048), "register StarIngress.report_last_us"),
    (lambda info: setattr(info.action_profiles[0], "max_group_size", 8), "action selector StarIngress.ecmp_selector"),
    (lambda info: setattr(info.value_sets[0], "size", 8), "value set StarParser.int_dscp"),
])
def test_other_mutations_of_the_p4info_are_caught(program, mutate, expected):
    info = load_p4info()
    mutate(info)
    problems = compare(program, info)
    assert any(expected in p for p in problems), problems


def test_renamed_header_field_in_the_program_is_caught(tmp_path):
    copy = tmp_path / "p4src"
    shutil.copytree(PROGRAM.parent, copy)
    headers = copy / "include" / "headers.p4"
    headers.write_text(headers.read_text().replace("ipv4_addr_t dst_addr;", "ipv4_addr_t dest_addr;"))
    lpm = copy / "include" / "ingress.p4"
    lpm.write_text(lpm.read_text().replace("hdr.ipv4.dst_addr: lpm;", "hdr.ipv4.dest_addr: lpm;"))
    problems = compare(parse_program(copy / "starnet.p4"), load_p4info())
    assert any("StarIngress.ipv4_lpm" in p and "hdr.ipv4.dest_addr" in p for p in problems), problems


def test_soft_switch_finds_every_name_it_uses_in_the_p4info():
    from softswitch.pipeline import Pipeline
    from softswitch.runtime_state import RuntimeState

    pipeline = Pipeline(RuntimeState(P4Schema.load(DEFAULT_P4INFO)))
    assert pipeline.snapshot.ipv4_lpm.info.name == "StarIngress.ipv4_lpm"
