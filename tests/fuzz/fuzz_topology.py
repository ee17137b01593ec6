"""Coverage-guided fuzzing (atheris) of the topology loader and what the testbed does with a
topology before anything runs: parse_topology (YAML → Topology, every field validated), the
addressing plan, the routes and every switch's P4Runtime program; and a round trip through
to_yaml, which must give the same topology back.

    .venv/bin/python tests/fuzz/fuzz_topology.py [libFuzzer options] [corpus dirs]
    make fuzz SECONDS=600

Input: the bytes of a topology file. A TopologyError (the loader's message naming the field) is
the expected answer to bad input; any other exception is a crash."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["topologies", "controller.routing"]):
    from controller.routing import compute_routes, port_configs
    from topologies.addressing import AddressPlan
    from topologies.spec import TopologyError, parse_topology

# Not fuzzed, imported after the targets so that those are instrumented.
from controller.program import switch_program  # noqa: E402
from wire.p4info import P4Schema  # noqa: E402

SCHEMA = P4Schema.load()
MAX_NODES = 64  # bigger inputs are valid but slow to route; the fuzzer learns nothing more from them


def one_input(data: bytes) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # load_topology answers non-UTF-8 files before the parser (tests/unit/topologies/test_spec.py)
    try:
        topo = parse_topology(text, "fuzz.yaml")
        if len(topo.switches) + len(topo.hosts) > MAX_NODES:
            return
        plan = AddressPlan(topo)
    except TopologyError:
        return
    again = parse_topology(topo.to_yaml(), "fuzz.yaml")
    if again != topo:
        raise AssertionError(f"to_yaml round trip changed the topology:\n{topo}\n{again}")
    routes = compute_routes(topo, plan)
    for switch in topo.switches:
        port_configs(topo, switch.name)
        switch_program(SCHEMA, topo, plan, switch.name, routes[switch.name], int_sample_log2=0)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
