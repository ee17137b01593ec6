"""The console, the top layer: `python -m testbed` (run, scenario, diagnose-eval, clean, …) and the
interactive CLI on a running testbed (cli.py). Everything below it is reached from here."""
