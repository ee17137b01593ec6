"""Flow workloads beside the collectives: an incast (N senders → one receiver at once) and background
flows (Poisson arrivals between random host pairs, log-uniform sizes), both seeded.

One agent process per host (`workloads.flows.agent`) sinks the flows sent to it and sends its own at
their scheduled times; the launcher (`workloads.flows.job`) records every flow's completion time
(FCT) and goodput into the job directory (flows.csv, results.json) and prints a summary.
`python -m workloads.flows incast|background …` runs them against the `make run` testbed; the
CLI has `incast` and `flows`.
"""
