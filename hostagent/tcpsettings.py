"""The TCP settings a control mode asks of a host's network namespace: ECN and congestion control.

Modes none, ecn and advice run cubic (Linux's default congestion control; `ecn` also requests ECN
on every connection, the others only accept it); mode bbr runs BBR (v1: it ignores ECN marks).
Both are per-namespace sysctls, taken by connections opened after they change. A namespace other
than the root one may default only to a congestion control listed in the root namespace's
net.ipv4.tcp_allowed_congestion_control (else the kernel answers EPERM), and a new namespace
inherits the root's default, which on this machine is bbr: so the testbed allows cubic and bbr in
the root namespace first (`allow_in_root_namespace`) and puts the list back when it stops.
"""

from __future__ import annotations

from pathlib import Path

SYSCTL = Path("/proc/sys/net/ipv4")
CUBIC, BBR = "cubic", "bbr"
NEEDED = (CUBIC, BBR)


class TcpSettingsError(RuntimeError):
    """A setting the kernel refused; the message names the sysctl and what to do."""


def congestion_control(mode: str) -> str:
    return BBR if mode == "bbr" else CUBIC


def apply_mode(mode: str, sysctl: Path = SYSCTL) -> tuple[str, str]:
    """Set this namespace's ECN and congestion control for `mode`; returns (tcp_ecn, congestion control)."""
    ecn = "1" if mode == "ecn" else "2"  # 1 = request ECN, 2 = only accept it (Linux's default)
    cc = congestion_control(mode)
    (sysctl / "tcp_ecn").write_text(ecn + "\n")
    try:
        (sysctl / "tcp_congestion_control").write_text(cc + "\n")
    except PermissionError as exc:
        allowed = (sysctl / "tcp_allowed_congestion_control").read_text().split()
        raise TcpSettingsError(f"net.ipv4.tcp_congestion_control: the kernel refused {cc!r} in this namespace "
                               f"(root namespace allows only {' '.join(allowed)}; the testbed adds it when it "
                               "starts)") from exc
    except OSError as exc:
        available = (sysctl / "tcp_available_congestion_control").read_text().split()
        raise TcpSettingsError(f"net.ipv4.tcp_congestion_control: cannot set {cc!r} ({exc.strerror}; "
                               f"available: {' '.join(available)})") from exc
    return ecn, cc


def allow_in_root_namespace(names: tuple[str, ...] = NEEDED, sysctl: Path = SYSCTL) -> str | None:
    """Add `names` to the root namespace's allowed congestion controls (run from the root namespace);
    returns the list as it was if it changed (for `restore_allowed`), else None."""
    path = sysctl / "tcp_allowed_congestion_control"
    before = path.read_text().split()
    missing = [name for name in names if name not in before]
    if not missing:
        return None
    try:
        path.write_text(" ".join(before + missing) + "\n")
    except OSError as exc:
        raise TcpSettingsError(f"net.ipv4.tcp_allowed_congestion_control: cannot add {' '.join(missing)} "
                               f"({exc.strerror}; the testbed needs root)") from exc
    return " ".join(before)


def restore_allowed(before: str, sysctl: Path = SYSCTL) -> None:
    (sysctl / "tcp_allowed_congestion_control").write_text(before + "\n")
