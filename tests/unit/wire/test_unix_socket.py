"""A Unix socket whose path would be too long (a deep STARNET_RUNS) is bound in a short directory instead."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from wire.runfiles import UNIX_PATH_MAX, unix_socket_path


def test_a_short_path_is_kept_and_a_long_one_moves_to_a_short_directory_that_works(tmp_path: Path) -> None:
    assert unix_socket_path(tmp_path / "controller.sock") == (tmp_path / "controller.sock", None)
    deep = tmp_path / ("d" * (UNIX_PATH_MAX - len(str(tmp_path)))) / "controller.sock"
    path, short = unix_socket_path(deep)
    try:
        assert short is not None and path == short / "controller.sock" and len(str(path)) <= UNIX_PATH_MAX
        with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
            server.bind(str(path))
            server.listen()
            client.connect(str(path))
    finally:
        if short is not None:
            shutil.rmtree(short)
