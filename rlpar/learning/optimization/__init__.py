"""Optimisers, the guarded gradient step, precision, compiled steps, and A3C's parameter servers."""
