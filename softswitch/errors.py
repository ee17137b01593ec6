"""The P4Runtime error a write or read raises (a gRPC status code and a message), and how a failed
Write reports its updates' errors in the call's status details."""

from __future__ import annotations

import collections
from collections.abc import Callable

import grpc

from wire.p4info import BitwidthError
from wire.proto import p4r, rpc_code, rpc_status


class P4RuntimeError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


def _of(code: grpc.StatusCode) -> Callable[[str], P4RuntimeError]:
    def make(message: str) -> P4RuntimeError:
        return P4RuntimeError(code, message)

    make.__name__ = make.__qualname__ = code.name.lower()
    return make


# One constructor per status code the server answers with (P4Runtime spec §8.3/§9/§12).
invalid = _of(grpc.StatusCode.INVALID_ARGUMENT)
not_found = _of(grpc.StatusCode.NOT_FOUND)
exists = _of(grpc.StatusCode.ALREADY_EXISTS)
unimplemented = _of(grpc.StatusCode.UNIMPLEMENTED)
exhausted = _of(grpc.StatusCode.RESOURCE_EXHAUSTED)
out_of_range = _of(grpc.StatusCode.OUT_OF_RANGE)


def value_error(exc: ValueError) -> P4RuntimeError:
    """P4Runtime spec §8.3: a value beyond its bitwidth is OUT_OF_RANGE; other bad bytestrings
    (empty) are INVALID_ARGUMENT."""
    return (out_of_range if isinstance(exc, BitwidthError) else invalid)(str(exc))


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


# Binary trailing metadata travels base64-encoded, and gRPC clients refuse trailers beyond 8 KiB
# (soft) / 16 KiB (hard) by default: the per-update details are cut to fit well below that, unless
# the switch runs with --error-details-bytes 0 (all of them) for clients that raise their
# grpc.max_metadata_size, as this project's controller and tools do (wire.proto.CLIENT_CHANNEL_OPTIONS).
# BMv2's PI sends every error (up to the last failed update) whatever the size: a default client
# then gets a bare RESOURCE_EXHAUSTED for a large failed batch instead of any detail.
DETAILS_BUDGET_BYTES = 4096


def abort_with_details(context: grpc.ServicerContext, code: grpc.StatusCode, message: str,
                        errors: list[p4r.Error], budget_bytes: int = DETAILS_BUDGET_BYTES) -> None:
    """P4Runtime spec, "Write RPC": one p4.v1.Error per update, in order, in the google.rpc.Status
    details. A batch whose details would not fit `budget_bytes` (0: no limit) gets those of its
    first updates only, and the message says how many were left out: the spec's "gRPC Metadata
    Maximum Size" notes that beyond 8 KB a default client receives a bare RESOURCE_EXHAUSTED instead."""
    status = rpc_status.Status(code=code.value[0], message=message)
    for i, error in enumerate(errors):
        status.details.add().Pack(error)
        if budget_bytes and status.ByteSize() > budget_bytes:
            del status.details[-1]
            failed_after = sum(1 for e in errors[i:] if e.canonical_code != rpc_code.OK)
            status.message = (f"{message} (details for the first {i} of {len(errors)} updates; "
                              f"{failed_after} more failed beyond them)")
            break
    context.abort_with_status(
        _Status(code, status.message, (("grpc-status-details-bin", status.SerializeToString()),))
    )
