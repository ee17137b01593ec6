"""The CLI's fault commands' arguments (testbed/cli/args.py parse_args): converted, defaults filled in,
and None for a wrong count or word, so the command prints its usage instead of failing."""

from __future__ import annotations

import pytest

from testbed.cli.args import mbps_or_off, parse_args, percent, positive


def test_words_are_converted_and_left_out_ones_take_their_defaults():
    assert parse_args("s1 s3 2%", (str, str, percent)) == ["s1", "s3", 2.0]
    assert parse_args("s3 s1 off", (str, str, mbps_or_off)) == ["s3", "s1", None]
    flap = (str, str, positive(int), positive(float))
    assert parse_args("s4 s2", flap, defaults=(10, 0.5)) == ["s4", "s2", 10, 0.5]
    assert parse_args("s4 s2 3", flap, defaults=(10, 0.5)) == ["s4", "s2", 3, 0.5]
    assert parse_args("s4 s2 3 0.2", flap, defaults=(10, 0.5)) == ["s4", "s2", 3, 0.2]


@pytest.mark.parametrize(("line", "kinds"), [
    ("s1 s3", (str, str, percent)),  # too few
    ("s1 s3 2 9", (str, str, percent)),  # too many
    ("s1 s3 two", (str, str, percent)),
    ("s3 s1 0", (str, str, mbps_or_off)),  # a rate must be > 0 ("off" restores)
    ("s4 s2 2.5", (str, str, positive(int))),
    ("s4 s2 -1", (str, str, positive(int))),
])
def test_a_wrong_count_or_word_gives_none(line, kinds):
    assert parse_args(line, kinds) is None
