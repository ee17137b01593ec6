"""Shared markers and skips: root/Mininet tests skip with a reason where they cannot run."""

from __future__ import annotations

import os
import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    is_root = os.geteuid() == 0
    has_mininet = shutil.which("mnexec") is not None
    for item in items:
        if ("root" in item.keywords or "mininet" in item.keywords) and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root (network namespaces); CI runs as root"))
        elif "mininet" in item.keywords and not has_mininet:
            item.add_marker(pytest.mark.skip(reason="needs Mininet (apt-get install mininet; `make deps`)"))
