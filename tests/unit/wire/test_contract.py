"""wire/ is the contract between the P4 program, the switches, the controller and the hosts: every
number it shares with starnet.p4 is checked against the P4 source here, and a changed value in the
source is caught (a mutation below)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from wire import cpu, drops, intmd
from wire.p4source import Program, parse_program

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = ROOT / "p4src" / "starnet.p4"

# starnet.p4 constant → the value wire/ gives it.
CONTRACT = {
    "CPU_PORT": cpu.CPU_PORT,
    "ETHERTYPE_PROBE": cpu.ETHERTYPE_PROBE,
    "REASON_INT_REPORT": cpu.REASON_INT_REPORT,
    "REASON_PROBE": cpu.REASON_PROBE,
    "REPORT_SESSION": cpu.REPORT_SESSION,
    "REPORT_TRUNCATE_BYTES": cpu.REPORT_TRUNCATE_BYTES,
    "REPORT_INTERVAL_US": cpu.REPORT_INTERVAL_US,
    "REPORT_CONGESTED_INTERVAL_US": cpu.REPORT_CONGESTED_INTERVAL_US,
    "REPORT_FLOW_SLOTS": cpu.REPORT_FLOW_SLOTS,
    "PACKET_IN_BYTES": cpu.PACKET_IN_BYTES,
    "ROLE_HOST": cpu.ROLE_HOST,
    "ROLE_FABRIC": cpu.ROLE_FABRIC,
    "DSCP_INT": intmd.DSCP_INT,
    "INT_TYPE_MD": intmd.INT_TYPE_MD,
    "INT_VERSION": intmd.INT_VERSION,
    "INT_HOP_WORDS": intmd.HOP_WORDS,
    "INT_MAX_HOPS": intmd.MAX_HOPS,
    "INT_MD_WORDS": intmd.MD_WORDS,
    "INT_INSTRUCTIONS": intmd.INSTRUCTIONS,
    "INT_DS_ID": intmd.DS_ID,
    "INT_DS_INSTRUCTIONS": intmd.DS_INSTRUCTIONS,
    "INT_DS_FLAG_CONGESTED": intmd.DS_FLAG_CONGESTED,
    "INT_FIXED_BYTES": intmd.FIXED_BYTES,
    "INT_HOP_BYTES": intmd.HOP_BYTES,
    "DROP_REASONS": len(drops.DROP_REASONS),
    **{f"DROP_{reason.upper()}": index for index, reason in enumerate(drops.DROP_REASONS)},
}


def differences(program: Program) -> list[str]:
    return [f"{name}: {program.constants.get(name)!r} in starnet.p4, {value!r} in wire/"
            for name, value in CONTRACT.items() if program.constants.get(name) != value]


def test_every_shared_number_is_the_programs():
    assert differences(parse_program(PROGRAM)) == []


def test_a_changed_value_in_the_program_is_caught(tmp_path):
    copy = tmp_path / "p4src"
    shutil.copytree(PROGRAM.parent, copy)
    headers = copy / "include" / "headers.p4"
    text = headers.read_text()
    assert "const bit<32> REPORT_SESSION = 500;" in text
    headers.write_text(text.replace("const bit<32> REPORT_SESSION = 500;", "const bit<32> REPORT_SESSION = 501;"))
    assert differences(parse_program(copy / "starnet.p4")) == ["REPORT_SESSION: 501 in starnet.p4, 500 in wire/"]



def test_the_committed_advice_code_is_what_advice_proto_generates(tmp_path):
    """wire/advice_pb2*.py and their stubs (mypy-protobuf) are committed (no generation at import,
    sys.path untouched): they must be what `make proto` makes from wire/advice.proto with the pinned
    grpcio-tools and mypy-protobuf."""
    from grpc_tools import protoc

    (tmp_path / "wire").mkdir()
    shutil.copy(ROOT / "wire" / "advice.proto", tmp_path / "wire" / "advice.proto")
    bin_dir = Path(sys.executable).parent
    assert protoc.main(["protoc", f"-I{tmp_path}", f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
                        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
                        f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}", f"--mypy_out={tmp_path}",
                        f"--mypy_grpc_out={tmp_path}", str(tmp_path / "wire" / "advice.proto")]) == 0
    for name in ("advice_pb2.py", "advice_pb2.pyi", "advice_pb2_grpc.py", "advice_pb2_grpc.pyi"):
        assert (tmp_path / "wire" / name).read_text() == (ROOT / "wire" / name).read_text(), \
            f"wire/{name} is stale: run `make proto`"
