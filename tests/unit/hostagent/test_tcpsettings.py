"""hostagent/tcpsettings.py against a fake /proc/sys/net/ipv4: what each mode writes, the root
namespace's allowed list, and the kernel's refusals as errors that name the sysctl."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostagent.tcpsettings import TcpSettingsError, allow_in_root_namespace, apply_mode, restore_allowed


@pytest.fixture
def sysctl(tmp_path: Path) -> Path:
    for name, value in (("tcp_ecn", "2"), ("tcp_congestion_control", "bbr"),
                        ("tcp_allowed_congestion_control", "reno bbr"),
                        ("tcp_available_congestion_control", "reno bbr cubic")):
        (tmp_path / name).write_text(value + "\n")
    return tmp_path


@pytest.mark.parametrize(("mode", "ecn", "cc"), [("none", "2", "cubic"), ("ecn", "1", "cubic"),
                                                 ("advice", "2", "cubic"), ("bbr", "2", "bbr")])
def test_each_mode_sets_ecn_and_congestion_control(sysctl, mode, ecn, cc):
    assert apply_mode(mode, sysctl) == (ecn, cc)
    assert (sysctl / "tcp_ecn").read_text() == ecn + "\n"
    assert (sysctl / "tcp_congestion_control").read_text() == cc + "\n"


def test_allowed_list_gains_what_is_missing_and_is_put_back(sysctl):
    before = allow_in_root_namespace(("cubic", "bbr"), sysctl)
    assert before == "reno bbr"
    assert (sysctl / "tcp_allowed_congestion_control").read_text().split() == ["reno", "bbr", "cubic"]
    assert allow_in_root_namespace(("cubic", "bbr"), sysctl) is None  # nothing missing: nothing changed
    restore_allowed(before, sysctl)
    assert (sysctl / "tcp_allowed_congestion_control").read_text().split() == ["reno", "bbr"]


def test_a_refused_congestion_control_is_an_error_naming_the_sysctl(sysctl):
    target = sysctl / "tcp_congestion_control"
    target.unlink()
    target.mkdir()  # writing it fails with an OSError (IsADirectoryError), as a refused write would
    with pytest.raises(TcpSettingsError, match=r"net\.ipv4\.tcp_congestion_control: cannot set 'cubic'.*available: "
                                               r"reno bbr cubic"):
        apply_mode("none", sysctl)
