"""The Vagrant VM's files are well-formed: the Vagrantfile parses as Ruby and the provisioning script
passes shellcheck (both installed by `make deps`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    assert shutil.which(tool), f"{tool} is not installed: `make deps` installs it (Makefile APT_PACKAGES)"
    return subprocess.run([tool, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_vagrantfile_is_valid_ruby():
    result = run("ruby", "-c", "Vagrantfile")
    assert result.returncode == 0 and "Syntax OK" in result.stdout, result.stdout + result.stderr


def test_provisioning_script_passes_shellcheck():
    result = run("shellcheck", "--severity=style", "vm/provision.sh")
    assert result.returncode == 0, result.stdout + result.stderr


def test_vagrantfile_names_the_script_and_the_resources_it_documents():
    text = (ROOT / "Vagrantfile").read_text()
    for needle in ('path: "vm/provision.sh"', '"STARNET_VM_CPUS", "2"', '"STARNET_VM_MEMORY", "4096"',
                   'provider "virtualbox"', 'provider "libvirt"', "vb.gui = false"):
        assert needle in text, needle
