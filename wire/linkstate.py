"""A port's carrier as Linux reports it (oper-status), read the same way by the soft switch (its
watch ports) and the controller (link failures)."""

from __future__ import annotations

from pathlib import Path


def carrier_up(operstate: str | None) -> bool:
    """UP, or UNKNOWN (an interface that does not report it)."""
    return (operstate or "").upper() in ("UP", "UNKNOWN")


def read_carrier(iface: str) -> bool:
    """The interface's carrier from sysfs; False for an interface that is gone."""
    try:
        return carrier_up(Path(f"/sys/class/net/{iface}/operstate").read_text().strip())
    except OSError:
        return False
