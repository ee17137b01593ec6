"""Injected faults handed to a running process through a JSON file it follows: the testbed writes
the whole set atomically (`write`), the process re-reads it when it changed (`Followed`). Soft
switches follow switches/<name>.faults.json (processing delay, port rates), all-reduce ranks
hosts/<name>.faults.json (compute delay).
"""

from __future__ import annotations

import json
from pathlib import Path


def path_of(run_dir: Path, node: str, kind: str) -> Path:
    """Where a node's faults file is: kind "switches" or "hosts"."""
    return run_dir / kind / f"{node}.faults.json"


def write(path: Path, faults: dict) -> None:
    """Replace `path` with `faults` (JSON) at once: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.replace(path)


class Followed:
    """A faults file, followed by its modification time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: int | None = None

    def changed(self) -> dict | None:
        """The file's faults when it changed since the last call ({} once it is gone), else None.
        Raises ValueError for a file that is not a JSON object (it is not read again until it changes)."""
        try:
            mtime: int | None = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime == self._seen:
            return None
        self._seen = mtime
        if mtime is None:
            return {}
        try:
            faults = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        if not isinstance(faults, dict):
            raise ValueError(f"{self.path}: a JSON object of faults expected, got {type(faults).__name__}")
        return faults
