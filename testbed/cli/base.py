"""What every group of CLI commands works with: the testbed, the console's output, Mininet, the jobs."""

from __future__ import annotations

from typing import IO, Any

from emulation.net import Testbed
from workloads.hosts import BackgroundJob


class Commands:
    """A group of `do_*` commands, mixed into StarNetCLI (a Mininet CLI, which provides these)."""

    tb: Testbed
    stdout: IO[str]
    mn: Any  # the Mininet network
    jobs: list[BackgroundJob]  # all-reduce and flow jobs started from this CLI

    def say(self, text: str) -> None:
        """One line to the console (progress of long commands)."""
        self.stdout.write(text + "\n")
