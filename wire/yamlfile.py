"""The one YAML loader of the project's files (topologies, scenarios) and the field reader they share.

Safe YAML only, and a key given twice in one mapping is an error naming the key and both lines
(PyYAML would silently keep the last). Every error is the caller's own ValueError subclass
(TopologyError, ScenarioError) and names the file and the field: ``demo.yaml: jobs[1].size: …``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a duplicated key in a mapping (merge keys `<<` still override)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def read_file(path: Path | str, error: type[ValueError]) -> str:
    """The text of `path`, or `error` saying why not (missing, unreadable, not UTF-8)."""
    path = Path(path)
    try:
        return path.read_text()
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror})") from None


def parse_yaml(text: str, source: str, error: type[ValueError]) -> Any:
    """The document in `text`; `error` naming `source` if it is not valid YAML or repeats a key."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise error(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise error(f"{source}: not valid YAML: nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - PyYAML's constructors: `!!float x` ValueError, `!!timestamp x` ...
        raise error(f"{source}: not valid YAML: {type(exc).__name__}: {exc}") from None


class Fields:
    """Reads fields out of a parsed document; each check fails with the file's error naming the field."""

    def __init__(self, source: str, error: type[ValueError]) -> None:
        self.source = source
        self.error = error

    def fail(self, where: str, message: str) -> ValueError:
        return self.error(f"{self.source}: {where}: {message}" if where else f"{self.source}: {message}")

    def mapping(self, value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                raise self.fail(f"{where}.{key}" if where else str(key),
                                f"unknown field (fields: {', '.join(sorted(allowed))})")
        return value

    def items(self, value: Any, where: str, empty: bool = True) -> list[Any]:
        if not isinstance(value, list) or (not empty and not value):
            raise self.fail(where, f"must be a {'' if empty else 'non-empty '}list, got {type(value).__name__}")
        return value

    def number(self, value: Any, where: str, low: float, high: float = math.inf, integer: bool = False) -> float:
        """A finite number in [low, high] (a whole one if `integer`: then an int)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise self.fail(where, f"must be a finite number, got {value!r}")
        if integer and int(value) != value:
            raise self.fail(where, f"must be a whole number, got {value!r}")
        if not low <= value <= high:
            raise self.fail(where, f"must be in [{low:g}, {high:g}], got {value!r}")
        return int(value) if integer else value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"must be a non-empty string, got {value!r}")
        return value

    def one_of(self, value: Any, where: str, choices: tuple[str, ...] | list[str]) -> str:
        if value not in choices:
            raise self.fail(where, f"{value!r} is not one of {', '.join(choices)}")
        return value
