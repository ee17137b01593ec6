"""A bench's results kept across sittings: a JSON line per measured cell, one file per version of
the code measured.

A bench whose whole grid does not fit one sitting of a 2-core machine (ten seeds of Hedera's
patterns, an exhaustive tuner sweep per cell) adds to a ledger each time it runs, and prints its
table over every cell the ledger holds. Cells measured on different days add up only when they
measured the same code: the ledger is named by the last commit that changed the paths a bench
names (its packages, itself, its scenario), and code that differs from that commit is kept apart
(`-dirty`), so a change to the code starts a new ledger.

    ledger = Ledger.for_code("bench-paths", CODE_PATHS)
    ledger.add({"seed": 3, ...})
    rows = ledger.rows()
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What every bench on a testbed measures: the packages a run executes.
TESTBED_CODE = ("wire", "topologies", "softswitch", "hostagent", "controller", "emulation", "workloads", "lab",
                "p4src")


@dataclass
class Ledger:
    path: Path
    clean: bool  # the code is its commit's (else the ledger is a -dirty one)

    @classmethod
    def for_code(cls, bench: str, paths: tuple[str, ...], tag: str = "", runs: Path | None = None) -> Ledger:
        """The ledger of `bench` for the code at `paths` (relative to the repository) as it is now:
        runs/<bench>/<commit>[-dirty][-<tag>].jsonl. A RuntimeError when git cannot say."""
        def git(*argv: str) -> str:
            try:
                done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True)
            except (OSError, subprocess.CalledProcessError) as exc:
                raise RuntimeError(f"ledger: git {' '.join(argv[:2])} failed in {ROOT} ({exc}); a ledger names "
                                   "the commit of the code it measured") from None
            return done.stdout.strip()

        commit = git("log", "-1", "--format=%h", "--", *paths)
        clean = not git("status", "--porcelain", "--", *paths)
        name = commit + ("" if clean else "-dirty") + (f"-{tag}" if tag else "")
        return cls((runs or ROOT / "runs") / bench / f"{name}.jsonl", clean)

    def add(self, row: dict) -> None:
        """Append one cell (with the time it was measured, `at`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps({**row, "at": time.strftime("%Y-%m-%d %H:%M")}) + "\n")

    def rows(self) -> list[dict]:
        """Every cell so far, in the order measured (a line cut short by a killed bench is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out
