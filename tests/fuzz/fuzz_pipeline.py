"""Coverage-guided fuzzing (atheris) of the soft switch's per-frame path and the controller's INT
report decoder: Pipeline.ingress with every table of a leaf populated and INT on every packet,
the INT engine's egress (transit hop or sink strip, with reports), and decode_report on every
report the sink emits and on the raw input.

    .venv/bin/python tests/fuzz/fuzz_pipeline.py [libFuzzer options] [corpus dirs]
    make fuzz SECONDS=600

Input: first byte = ingress port (mod 8), second = egress-side selector, the rest = the frame.
Any exception other than the decoder's IntFormatError is a crash: libFuzzer writes the input as
crash-<sha1> for a regression test."""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["softswitch", "wire", "controller.telemetry"]):
    from controller.telemetry import decode_report
    from softswitch.inband import IntPending
    from softswitch.pipeline import Pipeline
    from softswitch.runtime_state import RuntimeState
    from wire.intmd import IntFormatError
    from wire.p4info import P4Schema

# Not fuzzed, imported after the targets so that those are instrumented.
from controller.program import switch_program  # noqa: E402
from controller.routing import compute_routes  # noqa: E402
from topologies import leafspine  # noqa: E402
from topologies.addressing import AddressPlan  # noqa: E402


def leaf_pipeline(switch: str = "s3") -> tuple[Pipeline, list[bytes]]:
    topo = leafspine()
    plan = AddressPlan(topo)
    schema = P4Schema.load()
    state = RuntimeState(schema)
    for update in switch_program(schema, topo, plan, switch, compute_routes(topo, plan)[switch], int_sample_log2=0):
        state.apply(update)
    pipeline = Pipeline(state)
    reports: list[bytes] = []
    pipeline.packet_in = lambda frame, port, reason: reports.append(frame) or True
    return pipeline, reports


PIPELINE, REPORTS = leaf_pipeline()
NOW = [1000.0]


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    in_port, frame = data[0] % 8, data[2:]
    NOW[0] += 0.011  # past the report rate limit now and then
    PIPELINE.invalidate()  # every input walks the tables, not the flow cache
    REPORTS.clear()
    result = PIPELINE.ingress(frame, in_port, NOW[0])
    if result is not None:
        port, out = result
        if out.__class__ is IntPending:
            out.qdepth = data[1] % 70
            PIPELINE.int_engine.egress(out, port, len(frame) * 10, NOW[0] + 0.0001)
    for report in [*REPORTS, frame]:
        try:
            decode_report(report)
        except IntFormatError:
            pass


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
