"""Arguments of the CLI's commands: converters and a parser that says None (the caller prints its usage)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def percent(word: str) -> float:
    return float(word.rstrip("%"))


def mbps_or_off(word: str) -> float | None:
    """A drain rate > 0, or None for "off"."""
    if word == "off":
        return None
    mbps = float(word)
    if mbps <= 0:
        raise ValueError(word)
    return mbps


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def convert(word: str) -> float:
        value = kind(word)
        if value <= 0:
            raise ValueError(word)
        return value
    return convert


def parse_args(line: str, kinds: tuple[Callable[[str], Any], ...], defaults: tuple = ()) -> list | None:
    """The words of a command line, each through its converter; the last len(defaults) may be left
    out and take those. None when the count or a word is wrong (the caller prints its usage)."""
    words = line.split()
    if not len(kinds) - len(defaults) <= len(words) <= len(kinds):
        return None
    try:
        values = [kind(word) for kind, word in zip(kinds, words, strict=False)]
    except ValueError:
        return None
    missing = len(kinds) - len(words)
    return values + list(defaults[len(defaults) - missing:])
