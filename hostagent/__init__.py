"""Per-host agent: registers with the controller, subscribes to rate advice, paces each destination
with a TBF under an HTB classifier (pacer.py) and applies the mode's TCP settings (tcpsettings.py)."""
