"""Hyper-parameter search on Ray Tune (`search=asha`, `search=pbt`): trials are ordinary runs."""
