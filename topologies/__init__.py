"""Topology specs (YAML), generators and the addressing plan."""

from topologies.generators import dumbbell, fattree, leafspine, railopt, star, topology_by_name
from topologies.spec import Host, Link, Server, Switch, Topology, TopologyError, load_topology, parse_topology

__all__ = [
    "Host",
    "Link",
    "Server",
    "Switch",
    "Topology",
    "TopologyError",
    "dumbbell",
    "fattree",
    "leafspine",
    "load_topology",
    "parse_topology",
    "railopt",
    "star",
    "topology_by_name",
]
