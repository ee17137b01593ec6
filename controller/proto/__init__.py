"""Generated code of controller/proto/*.proto, built on first import (grpcio-tools) into _generated/.

    from controller.proto import advice_pb2, advice_pb2_grpc

The .proto files are the source; the generated modules are not committed and are rebuilt when a
.proto is newer than them, so the stubs always match the pinned protobuf runtime.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "_generated"
PROTOS = ("advice",)


def _build() -> None:
    from grpc_tools import protoc

    GENERATED.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=GENERATED) as tmp:
        for name in PROTOS:
            code = protoc.main(["grpc_tools.protoc", f"-I{HERE}", f"--python_out={tmp}", f"--grpc_python_out={tmp}",
                                str(HERE / f"{name}.proto")])
            if code != 0:
                raise RuntimeError(f"protoc failed on controller/proto/{name}.proto")
        for produced in Path(tmp).glob("*.py"):
            os.replace(produced, GENERATED / produced.name)  # atomic: concurrent importers see whole files


def _stale() -> bool:
    for name in PROTOS:
        source = HERE / f"{name}.proto"
        for suffix in ("_pb2.py", "_pb2_grpc.py"):
            target = GENERATED / f"{name}{suffix}"
            if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
                return True
    return False


if _stale():
    _build()
sys.path.insert(0, str(GENERATED))  # the generated _grpc module imports its _pb2 by top-level name
advice_pb2 = importlib.import_module("advice_pb2")
advice_pb2_grpc = importlib.import_module("advice_pb2_grpc")
