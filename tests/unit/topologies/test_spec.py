"""Topology specs, generators, validation messages and the addressing plan."""

from __future__ import annotations

import pytest

from emulation.nodes import intf_name
from topologies import TopologyError, dumbbell, fattree, leafspine, railopt, star, topology_by_name
from topologies.addressing import AddressPlan
from topologies.spec import load_topology, parse_topology, topology_from_dict


def test_default_leafspine_shape():
    topo = leafspine()
    assert [s.name for s in topo.switches if s.role == "spine"] == ["s1", "s2"]
    assert len(topo.hosts) == 8 and len(topo.links) == 8 + 4
    assert all(link.capacity_mbps == 20 for link in topo.links)


def test_fattree_4_has_20_switches_16_hosts():
    topo = fattree(4)
    assert len(topo.switches) == 20 and len(topo.hosts) == 16 and len(topo.links) == 48


def test_dumbbell():
    topo = dumbbell(3)
    assert len(topo.hosts) == 6 and topo.find_link("s1", "s2").capacity_mbps == 20


def test_star_is_one_switch_with_every_host_on_it():
    topo = star(16, capacity_mbps=1)
    assert [s.name for s in topo.switches] == ["s1"] and len(topo.hosts) == 16
    assert all(topo.host_link(h.name).other(h.name) == "s1" for h in topo.hosts)
    assert topology_by_name("star:4").name == "star-4"
    with pytest.raises(TopologyError, match="star: hosts must be >= 1"):
        star(0)


def test_unknown_node_names_the_field():
    data = leafspine().to_dict()
    data["links"][3]["b"] = "s9"
    with pytest.raises(TopologyError, match=r"links\[3\]\.b: unknown node 's9'"):
        topology_from_dict(data)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("links", 0, "capacity_mbps"), -5, r"links\[0\]\.capacity_mbps: must be in \[0\.001, "),
        (("links", 1, "queue_pkts"), 2.5, r"links\[1\]\.queue_pkts: must be a whole number"),
        (("switches", 0, "role"), "router", r"switches\[0\]\.role: unknown role"),
        (("hosts", 0, "name"), "H 1", r"hosts\[0\]\.name: invalid name"),
        # Found by tests/fuzz/fuzz_topology.py: each used to pass the loader and fail later.
        (("links", 4, "capacity_mbps"), float("inf"), r"links\[4\]\.capacity_mbps: must be a finite number"),
        (("links", 4, "capacity_mbps"), float("nan"), r"links\[4\]\.capacity_mbps: must be a finite number"),
        (("links", 0, "capacity_mbps"), 1e12, r"links\[0\]\.capacity_mbps: must be in \[0\.001, 100000\]"),
        (("links", 0, "queue_pkts"), 10**11, r"links\[0\]\.queue_pkts: must be in \[1, 524287\]"),
        (("links", 0, "b"), {}, r"links\[0\]\.b: unknown node \{\}"),
        (("links", 0, "a_port"), 300, r"links\[0\]\.a_port: must be in \[1, 254\]"),
    ],
)
def test_bad_fields_are_named(path, value, message):
    data = leafspine().to_dict()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(TopologyError, match=message):
        topology_from_dict(data)


def test_unknown_field_is_named():
    data = leafspine().to_dict()
    data["links"][2]["bandwidth"] = 10
    with pytest.raises(TopologyError, match=r"links\[2\]\.bandwidth: unknown field"):
        topology_from_dict(data)


def test_yaml_round_trip(tmp_path):
    topo = fattree(4)
    path = tmp_path / "t.yaml"
    path.write_text(topo.to_yaml())
    again = topology_by_name(str(path))
    assert again.links == topo.links


def test_addressing_is_unique_and_consistent():
    topo = fattree(4)
    plan = AddressPlan(topo)
    ips = [h.ip for h in plan.hosts.values()]
    macs = [h.mac for h in plan.hosts.values()]
    assert len(set(ips)) == 16 and len(set(macs)) == 16
    h1 = plan.hosts["h1"]
    assert plan.host_by_ip(h1.ip) is h1
    assert h1.gateway_mac == plan.switches[h1.switch].port_mac(h1.switch_port)


def test_topology_by_name_arguments():
    assert len(topology_by_name("leafspine:2,3,2").hosts) == 6
    with pytest.raises(TopologyError, match="unknown topology"):
        topology_by_name("ring")


def test_shipped_example_topology_loads():
    from pathlib import Path

    topo = topology_by_name(str(Path(__file__).parents[3] / "topologies/examples/mixed-capacity.yaml"))
    assert topo.name == "mixed-capacity"
    assert (len(topo.switches), len(topo.hosts), len(topo.links)) == (4, 4, 8)
    fast = [link for link in topo.links if {link.a, link.b} == {"s3", "s1"}][0]
    assert fast.capacity_mbps == 40 and fast.queue_pkts == 64


# Inputs tests/fuzz/fuzz_topology.py found that made PyYAML raise something other than YAMLError.
@pytest.mark.parametrize("text", [
    "switches:\n  - {name: s3,!!float eaf}\n",           # ValueError from the float constructor
    "links:\n  - {!!timestamp a: h1, b: s1}\n",         # AttributeError from the timestamp constructor
    "switches: " + "[" * 5000 + "]" * 5000 + "\n",       # RecursionError in the composer
])
def test_text_pyyaml_fails_on_is_a_topology_error(text):
    with pytest.raises(TopologyError, match=r"^fuzz\.yaml: not valid YAML"):
        parse_topology(text, "fuzz.yaml")


def test_non_utf8_file_is_a_topology_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(TopologyError, match="not UTF-8"):
        load_topology(path)


def test_scaled_sets_every_link_rate_and_keeps_the_rest():
    topo = leafspine()
    slow = topo.scaled(10)
    assert {link.capacity_mbps for link in slow.links} == {10}
    def shape(t):
        return [(k.a, k.b, k.a_port, k.b_port, k.queue_pkts) for k in t.links]

    assert shape(slow) == shape(topo)
    assert {link.capacity_mbps for link in topo.links} == {20}  # the original is untouched
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(TopologyError, match="link rate"):
            topo.scaled(bad)


TWO_NICS = """name: rails
switches: [{name: s1, role: spine}, {name: s3, role: leaf}, {name: s4, role: leaf}]
hosts: [{name: h1, nics: 2}, {name: h2}]
links:
  - {a: h1, b: s3}
  - {a: h1, b: s4}
  - {a: h2, b: s3}
  - {a: s3, b: s1}
  - {a: s4, b: s1}
"""


def test_a_host_may_have_a_nic_per_link_in_port_order():
    topo = parse_topology(TWO_NICS, "rails.yaml")
    assert topo.hosts[0].nics == 2
    assert [link.other("h1") for link in topo.host_links("h1")] == ["s3", "s4"]
    assert [intf_name(topo, "h1", link.port_of("h1")) for link in topo.host_links("h1")] == ["h1-eth0", "h1-eth1"]
    assert parse_topology(topo.to_yaml(), "again.yaml").hosts == topo.hosts  # nics survive the round trip
    with pytest.raises(TopologyError, match="host h1 has 2 NICs; the address plan"):
        AddressPlan(topo)  # the parts that take one NIC per host say so


@pytest.mark.parametrize(("old", "new", "message"), [
    ("{name: h1, nics: 2}", "{name: h1}", r"hosts\[0\]: host h1 has 2 links and 1 NIC \(nics: 1\)"),
    ("{name: h2}", "{name: h2, nics: 3}", r"hosts\[1\]: host h2 has 1 links and 3 NICs"),
    ("{name: h2}", "{name: h2, nics: 0}", r"hosts\[1\]\.nics: must be in \[1, 64\]"),
])
def test_links_and_nics_must_agree(old, new, message):
    with pytest.raises(TopologyError, match=message):
        parse_topology(TWO_NICS.replace(old, new), "rails.yaml")


def test_railopt_puts_each_gpu_on_its_rail_and_a_servers_gpus_on_one_nvlink():
    topo = railopt(servers=3, gpus=2, spines=2, nvlink_ratio=4)
    assert [s.name for s in topo.servers] == ["srv1", "srv2", "srv3"]
    assert [s.gpus for s in topo.servers] == [("h1", "h2"), ("h3", "h4"), ("h5", "h6")]
    rails = {h.name: topo.host_link(h.name).other(h.name) for h in topo.hosts}
    assert rails == {"h1": "s3", "h3": "s3", "h5": "s3", "h2": "s4", "h4": "s4", "h6": "s4"}  # GPU r on rail r
    assert {n for n, _ in topo.neighbours("s3") if topo.is_switch(n)} == {"s1", "s2"}
    assert topo.server_of("h4").name == "srv2" and topo.nvlink_mbps("h4") == 80.0  # 4 x 20 Mbit/s
    again = parse_topology(topo.to_yaml(), "again.yaml")
    assert again.servers == topo.servers and again.scaled(10).nvlink_mbps("h4") == 40.0
    assert topology_by_name("railopt:2,4,1").servers[1].gpus == ("h5", "h6", "h7", "h8")
    assert leafspine().servers == [] and leafspine().server_of("h1") is None
    with pytest.raises(TopologyError, match="host h1 is in no server"):
        leafspine().nvlink_mbps("h1")


SERVERS = """name: two-servers
defaults: {nvlink_ratio: 2}
switches: [{name: s1, role: leaf}]
hosts: [{name: h1}, {name: h2}, {name: h3}]
links: [{a: h1, b: s1}, {a: h2, b: s1}, {a: h3, b: s1}]
servers: [{name: srv1, gpus: [h1, h2]}, {name: srv2, gpus: [h3], nvlink_ratio: 16}]
"""


def test_servers_from_yaml_take_the_default_ratio_or_their_own():
    topo = parse_topology(SERVERS, "servers.yaml")
    assert [(s.name, s.gpus, s.nvlink_ratio) for s in topo.servers] == [("srv1", ("h1", "h2"), 2.0),
                                                                        ("srv2", ("h3",), 16.0)]


@pytest.mark.parametrize(("old", "new", "message"), [
    ("gpus: [h1, h2]}", "gpus: [h1, h9]}", r"servers\[0\]\.gpus\[1\]: unknown host 'h9'"),
    ("gpus: [h3]", "gpus: [h1]", r"servers\[1\]\.gpus\[0\]: GPU h1 is already in srv1"),
    ("gpus: [h3]", "gpus: []", r"servers\[1\]\.gpus: server srv2 holds no GPU"),
    ("name: srv2", "name: s1", r"servers\[1\]\.name: duplicate node name 's1'"),
    ("nvlink_ratio: 16", "nvlink_ratio: 0", r"servers\[1\]\.nvlink_ratio: must be in"),
    ("nvlink_ratio: 2}", "nvlink_ratio: x}", r"defaults\.nvlink_ratio: must be a number"),
    ("gpus: [h3]", "cpus: [h3]", r"servers\[1\]\.cpus: unknown field"),
])
def test_bad_servers_are_named_by_field(old, new, message):
    with pytest.raises(TopologyError, match=message):
        parse_topology(SERVERS.replace(old, new), "servers.yaml")


def test_generator_arguments_may_be_named_and_bad_ones_are_named_in_the_error():
    topo = topology_by_name("railopt:servers=4,gpus=4")
    assert (len(topo.servers), len(topo.hosts), topo.name) == (4, 16, "railopt-4x4x2")
    assert topology_by_name("railopt:2,2,1,nvlink_ratio=2.5").servers[0].nvlink_ratio == 2.5
    for spec, message in (("railopt:cpus=2", "railopt has no parameter 'cpus'"),
                          ("railopt:servers=x", "'servers=x' is not a number"),
                          ("railopt:gpus=2,3", "a positional argument after a named one"),
                          ("dumbbell:1,2,3,4", "dumbbell takes at most 3 arguments")):
        with pytest.raises(TopologyError, match=message):
            topology_by_name(spec)
