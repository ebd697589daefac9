"""Episode-end flags laid out like rlpar's rollouts, for the advantage-estimator tests."""

import numpy as np


def rollout_flags(rng, T, N):
    """(terminated, truncated, valid), [T, N], as Gymnasium's next-step autoreset produces them:
    the step after an episode end is an autoreset step (invalid, never itself an end), and a
    rollout may start on one. Some ends are both terminated and truncated, as Gymnasium allows."""
    terminated, truncated = np.zeros((T, N), bool), np.zeros((T, N), bool)
    valid = np.ones((T, N), bool)
    pending = rng.random(N) < 0.3
    for t in range(T):
        valid[t] = ~pending
        ends = valid[t] & (rng.random(N) < 0.25)
        kind = rng.integers(0, 3, N)  # 0: terminated, 1: truncated, 2: both
        terminated[t] = ends & (kind != 1)
        truncated[t] = ends & (kind != 0)
        pending = ends
    return terminated, truncated, valid


def covers_every_case(terminated, truncated, valid):
    """True when the flags hold a termination, a truncation alone, an autoreset step on the first
    row, and a last row with a termination, a truncation alone and a step that goes on."""
    last = terminated[-1], truncated[-1] & ~terminated[-1], valid[-1] & ~terminated[-1] & ~truncated[-1]
    return bool(terminated.any() and (truncated & ~terminated).any() and (~valid[0]).any() and all(c.any() for c in last))
