"""P4Runtime control plane: switch sessions, routing/ECMP from the topology, (later) telemetry and advice."""
