"""Per-environment exploration for value-based actors (Ape-X; asynchronous n-step Q-learning):
each environment keeps its own ε for the whole run, from nearly random to nearly greedy, and
the run's statistics count the greedier half, whose returns say what the policy has learned."""

from __future__ import annotations

import numpy as np


class SpreadEpsilons:
    def __init__(self, *, num_envs: int, epsilon: float = 0.4, alpha: float = 7.0):
        """Environment i of N explores with ε_i = epsilon^(1 + alpha i / (N - 1)) (Horgan et al.
        2018: 0.4 and 7, one environment per actor)."""
        exponents = 1.0 + alpha * np.arange(num_envs) / max(num_envs - 1, 1)
        self.values = epsilon ** exponents
        self.greedy = self.values <= np.median(self.values)

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    def greedier_episodes(self, batch) -> tuple[list, list]:
        """Returns and lengths of the episodes that ended in the greedier half (ε_i at or below
        the median)."""
        keep = [self.greedy[batch.env_ids[column]] for _, column in batch.episode_ends]
        returns = [r for r, kept in zip(batch.episode_returns, keep) if kept]
        lengths = [n for n, kept in zip(batch.episode_lengths, keep) if kept]
        return returns, lengths
