"""The one YAML loader: duplicate keys refused, errors naming the file and the field, in both file kinds."""

from __future__ import annotations

import pytest

from lab.scenario import ScenarioError, parse_scenario
from topologies.spec import TopologyError, parse_topology
from wire.yamlfile import Fields, parse_yaml

TOPOLOGY = """name: two
switches: [{name: s1}]
hosts: [{name: h1}, {name: h2}]
links:
  - {a: h1, b: s1}
  - {a: h2, b: s1}
"""


def test_a_duplicated_key_is_refused_with_both_lines() -> None:
    with pytest.raises(ValueError, match=r"f\.yaml: not valid YAML: .*duplicate key 'a' \(first on line 1\).*line 3"):
        parse_yaml("a: 1\nb: 2\na: 3\n", "f.yaml", ValueError)


def test_a_duplicated_key_deep_inside_is_refused() -> None:
    with pytest.raises(ValueError, match=r"duplicate key 'x'"):
        parse_yaml("top:\n  - {x: 1, y: 2, x: 3}\n", "f.yaml", ValueError)


def test_merge_keys_and_equal_values_under_other_keys_are_fine() -> None:
    doc = parse_yaml("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 5\n", "f.yaml", ValueError)
    assert doc["other"] == {"x": 5, "y": 2}
    assert parse_yaml("a: 1\nb: 1\n", "f.yaml", ValueError) == {"a": 1, "b": 1}


def test_a_topology_with_a_key_twice_is_refused() -> None:
    assert parse_topology(TOPOLOGY, "t.yaml").name == "two"
    with pytest.raises(TopologyError, match=r"t\.yaml: not valid YAML: duplicate key 'name'"):
        parse_topology(TOPOLOGY + "name: three\n", "t.yaml")
    with pytest.raises(TopologyError, match=r"duplicate key 'b'"):
        parse_topology(TOPOLOGY.replace("{a: h2, b: s1}", "{a: h2, b: s1, b: h1}"), "t.yaml")


def test_a_scenario_with_a_key_twice_is_refused() -> None:
    text = ("name: x\nmodes: [none]\nduration_s: 10\ntopology: {name: leafspine}\n"
            "jobs:\n  - {name: a, kind: allreduce, hosts: [h1, h2], size: 64K, iters: 1, iters: 9}\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml: not valid YAML: duplicate key 'iters'"):
        parse_scenario(text, "s.yaml")
    assert parse_scenario(text.replace(", iters: 9", ""), "s.yaml").jobs[0].iters == 1


@pytest.mark.parametrize(("value", "kwargs", "message"), [
    (True, {}, "must be a number, got True"),
    ("3", {}, "must be a number, got '3'"),
    (float("nan"), {}, "must be a finite number"),
    (2.5, {"integer": True}, "must be a whole number, got 2.5"),
    (11, {"high": 10}, r"must be in \[1, 10\], got 11"),
])
def test_numbers_are_checked_and_named(value: object, kwargs: dict, message: str) -> None:
    with pytest.raises(KeyError, match=r"f\.yaml: a\.b: " + message):
        Fields("f.yaml", KeyError).number(value, "a.b", 1, **kwargs)  # type: ignore[arg-type]
    assert Fields("f.yaml", ValueError).number(3.0, "a.b", 1, integer=True) == 3
