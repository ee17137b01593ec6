"""Checks every tier shares: wait on a condition instead of sleeping, and compare a measurement
with a named tolerance so a failure prints measured, expected and tolerance together."""

from __future__ import annotations

from emulation.waiting import wait_until

__all__ = ["assert_within", "wait_until"]


def assert_within(measured: float, expected: float, tolerance: float, what: str = "value") -> None:
    """|measured - expected| <= tolerance, else an AssertionError naming all three."""
    assert abs(measured - expected) <= tolerance, (
        f"{what}: measured {measured:g}, expected {expected:g} ± {tolerance:g} "
        f"(off by {measured - expected:+g})")
