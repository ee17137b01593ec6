"""The contract, the bottom layer: what crosses between components, defined once.

CPU-port headers and INT report pacing (cpu.py), the INT layout and frame editing (intmd.py), drop
reasons (drops.py), the faults file switches and ranks follow (faultsfile.py), link-state files
(linkstate.py), fidelity records (fidelity.py), real-time scheduling (realtime.py), P4Info loading
and name lookup (p4info.py), the P4 source reader (p4source.py), the P4Runtime protos (proto.py)
and the advice API (advice.proto and its generated code). It imports nothing of the project.
"""
