"""The P4Runtime error a write or read raises: a gRPC status code and a message."""

from __future__ import annotations

import grpc

from wire.p4info import BitwidthError


class P4RuntimeError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


def invalid(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.NOT_FOUND, message)


def exists(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.ALREADY_EXISTS, message)


def unimplemented(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.UNIMPLEMENTED, message)


def exhausted(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def out_of_range(message: str) -> P4RuntimeError:
    return P4RuntimeError(grpc.StatusCode.OUT_OF_RANGE, message)


def value_error(exc: ValueError) -> P4RuntimeError:
    """P4Runtime spec §8.3: a value beyond its bitwidth is OUT_OF_RANGE; other bad bytestrings
    (empty) are INVALID_ARGUMENT."""
    return (out_of_range if isinstance(exc, BitwidthError) else invalid)(str(exc))
