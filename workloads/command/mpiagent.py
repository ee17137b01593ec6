"""Open MPI's launch agent on the testbed: mpirun (in rank 0's host) starts its daemon on another host
through this instead of ssh (`--mca plm_rsh_agent`): `mpiagent HOSTS.json HOST COMMAND…` runs the
command, a remote shell's line, inside HOST's namespaces (Mininet's mnexec), with a UTS namespace of
its own named after the host — Mininet's hosts share one hostname, and Open MPI tells nodes apart by
it. HOSTS.json maps each --host address to {"name", "pid"}: the host's name and the PID holding its
namespaces (the launcher writes it into the job's directory)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: mpiagent HOSTS.json HOST COMMAND...", file=sys.stderr)
        return 2
    hosts = json.loads(Path(argv[0]).read_text())
    words = argv[1:]
    while words and words[0].startswith("-"):  # options meant for ssh (-x and the like)
        words = words[1:]
    if not words or words[0] not in hosts:
        print(f"mpiagent: no host {words[0] if words else ''!r} in {argv[0]} ({', '.join(hosts)})", file=sys.stderr)
        return 2
    host, command = hosts[words[0]], " ".join(words[1:])
    line = f"hostname {shlex.quote(host['name'])} && exec sh -c {shlex.quote(command)}"
    os.execvp("mnexec", ["mnexec", "-a", str(host["pid"]), "unshare", "--uts", "sh", "-c", line])
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
