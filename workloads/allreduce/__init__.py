"""All-reduce ranks, their launcher and the auto-tuner (nccl-tests-style results)."""
