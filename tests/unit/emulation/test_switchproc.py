"""Where a switch process serves P4Runtime and how it is reached, without starting one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from emulation.ports import address_answers, free_ports
from emulation.spawn import LocalSpawner
from emulation.switchproc import SoftSwitchProcess


class ElsewhereSpawner(LocalSpawner):
    """A spawner whose processes run on another server (only its command prefix matters here)."""

    def command_prefix(self, shared: bool = True) -> list[str]:
        return ["ssh", "srv2", "--"] if shared else ["ssh", "-S", "none", "srv2", "--"]


def served_on(switch: SoftSwitchProcess) -> str:
    cmd = switch.command()
    return cmd[cmd.index("--grpc-server-addr") + 1]


def test_a_local_switch_serves_and_is_reached_on_loopback(tmp_path: Path) -> None:
    switch = SoftSwitchProcess("s1", 1, 50123, tmp_path, [], {})
    assert served_on(switch) == switch.grpc_address == "127.0.0.1:50123"
    info = switch.describe()
    assert info["grpc"] == "127.0.0.1:50123" and "remote" not in info


def test_a_switch_elsewhere_serves_on_its_socket_and_is_reached_through_the_forward(tmp_path: Path) -> None:
    switch = SoftSwitchProcess("s1", 1, 0, tmp_path, [], {}, spawner=ElsewhereSpawner(tmp_path),
                               serve_on="unix:/run/starnet/x/s1.sock", dial=f"unix:{tmp_path / 'p4rt-s1.sock'}")
    assert served_on(switch) == "unix:/run/starnet/x/s1.sock"
    info = switch.describe()
    assert info["grpc"] == f"unix:{tmp_path / 'p4rt-s1.sock'}"
    assert info["remote"] == ["ssh", "-S", "none", "srv2", "--"]  # the controller's long-lived stream: its own


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::", ""])
def test_a_wildcard_address_is_refused(tmp_path: Path, wildcard: str) -> None:
    with pytest.raises(ValueError, match="wildcard"):
        SoftSwitchProcess("s1", 1, 50123, tmp_path, [], {}, serve_on=wildcard)


def test_address_answers_on_tcp_and_unix_sockets(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    assert not address_answers(f"127.0.0.1:{port}")
    with socket.create_server(("127.0.0.1", port)):
        assert address_answers(f"127.0.0.1:{port}")
    path = tmp_path / "p4rt.sock"
    assert not address_answers(f"unix:{path}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        assert address_answers(f"unix:{path}")
