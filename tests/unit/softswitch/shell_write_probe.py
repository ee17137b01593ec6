"""Run by test_p4runtime_shell.py in p4runtime-shell's own venv (.venv-shell): connect to a soft switch
as a user of `make shell` would, make a Write with one failing update and say what p4runtime-shell raised."""

import sys

import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException

addr, device = sys.argv[1], int(sys.argv[2])
sh.setup(device_id=device, grpc_addr=addr, election_id=(0, 1))  # the pipeline as the switch has it
try:
    entry = sh.TableEntry("StarIngress.ipv4_lpm")
    entry.match["hdr.ipv4.dst_addr"] = "10.77.1.0/24"
    entry.delete()  # no such entry: NOT_FOUND
    print("raised nothing")
except P4RuntimeWriteException as exc:
    print("P4RuntimeWriteException", " ".join(f"{index}:{error.canonical_code}" for index, error in exc.errors))
except Exception as exc:  # noqa: BLE001 - the test reports what was raised instead
    print("raised", type(exc).__name__, exc)
finally:
    sh.teardown()
