"""The control plane: asyncio P4Runtime sessions, the switch program, routes and ECMP, the INT
collector (telemetry.py), the advisor and its loop (advisor.py, advice.py), the advice API
(service.py), link health (portstatus.py, links.py), injected faults (faults.py) and fault
localisation (localizer.py). It imports the topology model and the contract only."""
