"""Running mean and variance, merged batch by batch (Chan et al.'s parallel-variance formula)."""

from __future__ import annotations

import numpy as np


def merge_moments(mean, var, count: float, batch_mean, batch_var, batch_count: int):
    """(mean, variance, count) of the data seen so far followed by a batch with these moments."""
    delta = batch_mean - mean
    total = count + batch_count
    new_mean = mean + delta * batch_count / total
    m2 = var * count + batch_var * batch_count + np.square(delta) * count * batch_count / total
    return new_mean, m2 / total, total
