"""The layers' import contracts (pyproject.toml, `make lint`): kept by the tree as it is, and broken
by an upward import or an import circle planted in a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The packages' Python files and pyproject.toml, copied."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyi"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def lint(tree: Path) -> subprocess.CompletedProcess:
    # The copy comes first on the path: the editable install would otherwise map the packages to ROOT.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120)


def plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}  # planted by the test\n")


def test_every_package_is_layered() -> None:
    layered = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {name.strip() for layer in layered for name in layer.split("|")}
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"}
    assert named == set(PACKAGES) == on_disk


def test_the_tree_keeps_its_contracts(tree: Path) -> None:
    done = lint(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" KEPT") == 2


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("wire/cpu.py", "from testbed import cli", "wire.cpu -> testbed.cli"),
    ("controller/telemetry.py", "import emulation.net", "controller.telemetry -> emulation.net"),
    ("softswitch/egress.py", "import hostagent.pacer", "softswitch.egress -> hostagent.pacer"),
])
def test_an_upward_import_breaks_the_lint(tree: Path, module: str, line: str, broken: str) -> None:
    plant(tree / module, line)
    done = lint(tree)
    assert done.returncode != 0
    assert "Layers import only downward BROKEN" in done.stdout
    assert broken in done.stdout


def test_an_import_circle_breaks_the_lint(tree: Path) -> None:
    plant(tree / "lab/results.py", "import lab.report")
    done = lint(tree)
    assert done.returncode != 0
    assert "No import circle between the modules of a package BROKEN" in done.stdout
