"""The emulation layer: brings a topology up in Mininet and down again.

Node classes (nodes.py) and the bring-up (net.py: `Testbed`), the switch processes (switchproc.py),
run directories and the records cleanup uses (rundir.py), reading switches (p4read.py, dump.py),
test traffic (traffic.py), CPU provisioning (rtwatch.py, cpuuse.py, budget.py) and the fidelity
monitor (fidelity.py). It imports the control plane, the data plane and the contract, never the
workloads, the lab or the console above it.
"""
