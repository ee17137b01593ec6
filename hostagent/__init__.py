"""Per-host agent: registers with the controller, subscribes to rate advice, paces with HTB."""
