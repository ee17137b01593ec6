"""The Vagrant VM's files are well-formed: the Vagrantfile parses as Ruby and the provisioning script
passes shellcheck (both installed by `make deps`); with STARNET_VMS=2 it defines a cluster (read through a
stand-in for Vagrant that records its calls: Vagrant itself is not on this machine)."""

from __future__ import annotations

import json
import os
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


# A stand-in for Vagrant: records every call the Vagrantfile makes on its config, blocks run as Vagrant runs them
RECORDER = r'''
require "json"
$calls = []
class Rec
  def initialize(path) = @path = path
  def method_missing(name, *args, **kw, &blk)
    $calls << { "call" => (@path + [name.to_s]).join("."), "args" => args.map(&:to_s),
                "kw" => kw.transform_keys(&:to_s).transform_values(&:to_s) }
    child = Rec.new(@path + [name.to_s])
    blk&.call(child, child)
    child
  end
  def respond_to_missing?(*) = true
end
module Vagrant
  def self.configure(_version) = yield(Rec.new(["config"]))
end
load ARGV[0]
puts JSON.generate({ "calls" => $calls, "setup" => (defined?(CLUSTER_SETUP) ? CLUSTER_SETUP : "") })
'''


def vagrant_calls(tmp_path: Path, vms: str | None) -> dict:
    shutil.copy(ROOT / "Vagrantfile", tmp_path / "Vagrantfile")  # its key is made beside it, not in the repository
    (tmp_path / "recorder.rb").write_text(RECORDER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARNET_")} | ({"STARNET_VMS": vms} if vms else {})
    done = subprocess.run(["ruby", "recorder.rb", "Vagrantfile"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_one_vm_by_default_with_no_cluster_network_and_no_key(tmp_path):
    calls = vagrant_calls(tmp_path, None)["calls"]
    assert [c["args"] for c in calls if c["call"] == "config.vm.define"] == [["starnet"]]
    assert not [c for c in calls if c["call"].endswith("vm.network")]
    assert not (tmp_path / ".vagrant").exists()


def test_a_cluster_of_two_vms_shares_a_key_a_jumbo_network_and_the_repository(tmp_path):
    out = vagrant_calls(tmp_path, "2")
    calls = out["calls"]
    assert [c["args"] for c in calls if c["call"] == "config.vm.define"] == [["starnet"], ["starnet2"]]
    networks = [c["kw"]["ip"] for c in calls if c["call"].endswith("vm.network")]
    assert networks == ["192.168.56.11", "192.168.56.12"]
    key = tmp_path / ".vagrant" / "starnet-cluster" / "cluster_key"
    assert key.exists() and key.with_suffix(".pub").exists()  # made once, for both
    files = [c["kw"]["source"] for c in calls if c["call"].endswith("vm.provision") and c["args"] == ["file"]]
    assert files == [str(key), f"{key}.pub"] * 2
    setup = [c for c in calls if c["call"].endswith("vm.provision") and c["kw"].get("name") == "starnet-cluster"]
    assert [c["kw"]["args"] for c in setup] == [json.dumps(["192.168.56.11"]), json.dumps(["192.168.56.12"])]
    # libvirt: one folder for every VM (NFS), not a copy each
    assert any(c["call"] == "config.vm.provider.vm.synced_folder" and c["kw"].get("type") == "nfs" for c in calls)
    script = tmp_path / "cluster-setup.sh"
    script.write_text(out["setup"])
    result = run("shellcheck", "--severity=style", "-s", "sh", str(script))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "/etc/starnet/cluster_key" in out["setup"] and "mtu: %s" in out["setup"] and "9100" in out["setup"]
