"""Workloads that run on the testbed: all-reduce jobs, incast and background flows."""
