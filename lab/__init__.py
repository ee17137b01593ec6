"""The lab: what is run on a testbed and what comes out of it.

Scenarios (scenario.py) and their runner (experiment.py), what a run measured (results.py) and its
report (report.py); the incast measurement and the senders' TCP state (incast.py, tcpstate.py,
tcpplot.py); a link cut under a ring (failover.py); the localisation evaluation (diagnose_eval.py);
ECMP collisions made on purpose (collisions.py); the long benches' results kept across sittings,
per version of the code they measured (ledger.py). It sits on the workloads and the emulation;
only the console (testbed/) imports it.
"""
