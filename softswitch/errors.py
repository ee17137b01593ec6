"""The P4Runtime error a write or read raises: a gRPC status code and a message."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from wire.p4info import BitwidthError


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
