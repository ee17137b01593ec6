"""p4runtime-shell (make shell) against a soft switch process: a Write whose one update fails raises
its P4RuntimeWriteException carrying that update's code, as against BMv2 (P4Runtime spec, "Write RPC":
the call's status is UNKNOWN with one p4.v1.Error per update)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from emulation.ports import free_ports, port_answers
from emulation.rundir import stop_process
from emulation.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
SHELL_PYTHON = Path(sys.prefix + "-shell") / "bin" / "python"  # the Makefile's $(VENV)-shell
NOT_FOUND = 5  # google.rpc.Code


def test_a_failing_single_update_write_raises_p4runtime_write_exception(tmp_path: Path) -> None:
    assert SHELL_PYTHON.exists(), f"{SHELL_PYTHON} missing: `make deps` builds p4runtime-shell's venv"
    port = free_ports(1)[0]
    with (tmp_path / "switch.log").open("wb") as log:
        switch = subprocess.Popen([sys.executable, "-m", "softswitch", "--device-id", "7", "--grpc-server-addr",
                                   f"127.0.0.1:{port}", "--p4info", str(ROOT / "p4src/starnet.p4info.txtpb"),
                                   "--no-fidelity"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: port_answers(port) or switch.poll() is not None, 20.0) and switch.poll() is None, \
            (tmp_path / "switch.log").read_text()
        probe = subprocess.run([str(SHELL_PYTHON), str(Path(__file__).with_name("shell_write_probe.py")),
                                f"127.0.0.1:{port}", "7"], capture_output=True, text=True, timeout=120)
    finally:
        stop_process(switch)
    lines = probe.stdout.strip().splitlines()
    assert lines and lines[-1] == f"P4RuntimeWriteException 0:{NOT_FOUND}", probe.stdout + probe.stderr
