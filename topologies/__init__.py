"""Topology specs (YAML), generators and the addressing plan."""

from topologies.generators import dumbbell, fattree, leafspine, topology_by_name
from topologies.spec import Host, Link, Switch, Topology, TopologyError, load_topology, parse_topology

__all__ = [
    "Host",
    "Link",
    "Switch",
    "Topology",
    "TopologyError",
    "dumbbell",
    "fattree",
    "leafspine",
    "load_topology",
    "parse_topology",
    "topology_by_name",
]
