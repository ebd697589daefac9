"""One readable module per algorithm; each owns its training step (see base.py)."""
