"""On a failing integration test, keep a post-mortem of its fabric in the run directory:
dump-<test>.txt with every switch's tables and counters (P4Runtime) and the collector's state."""

from __future__ import annotations

import re

import pytest

from emulation.dump import dump_fabric
from emulation.net import Testbed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Testbed) and value.net is not None:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name)
            path = dump_fabric(value, value.run_dir / f"dump-{name}.txt", reason=f"{item.nodeid} failed")
            report.sections.append(("fabric dump", f"fabric state written to {path}"))
