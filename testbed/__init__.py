"""Mininet integration: switch/host node classes, bring-up, CLI, run directories and cleanup."""
