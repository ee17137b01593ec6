"""A user's own program, one process per host: torch.distributed, Gloo, MPI or anything else (job.py)."""
