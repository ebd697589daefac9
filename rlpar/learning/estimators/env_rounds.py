"""Per-environment state over a batch whose columns may repeat an environment (one worker's two
rollouts in one batch): the reward normaliser and the n-step writer follow each environment id."""

from __future__ import annotations

import numpy as np


def rounds_of_distinct_envs(env_ids) -> list[np.ndarray]:
    """A batch's columns in rounds within which each environment appears once, in batch order.
    One environment twice (one worker's two rollouts in one batch): its second column is in the
    next round, so state followed per environment id continues from the first."""
    env_ids = np.asarray(env_ids)
    order = np.argsort(env_ids, kind="stable")
    ranked = env_ids[order]
    starts = np.r_[True, ranked[1:] != ranked[:-1]] if len(ranked) else np.zeros(0, bool)
    positions = np.arange(len(ranked))
    rank = np.empty(len(ranked), np.int64)  # how many earlier columns hold the same environment
    rank[order] = positions - np.maximum.accumulate(np.where(starts, positions, 0))
    return [np.flatnonzero(rank == round_) for round_ in range(int(rank.max()) + 1 if len(rank) else 0)]
