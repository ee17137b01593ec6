"""Wait on a condition instead of sleeping (testbed code and every test tier)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout_s: float = 5.0, interval_s: float = 0.1) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
