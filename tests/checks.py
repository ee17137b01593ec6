"""Checks every tier shares: wait on a condition instead of sleeping, and compare a measurement
with a named tolerance so a failure prints measured, expected and tolerance together."""

from __future__ import annotations

import time


def wait_until(predicate, timeout_s: float = 5.0, interval_s: float = 0.1) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def assert_within(measured: float, expected: float, tolerance: float, what: str = "value") -> None:
    """|measured - expected| <= tolerance, else an AssertionError naming all three."""
    assert abs(measured - expected) <= tolerance, (
        f"{what}: measured {measured:g}, expected {expected:g} ± {tolerance:g} "
        f"(off by {measured - expected:+g})")
