"""Per-environment exploration for many actors (Ape-X; asynchronous n-step Q-learning; Ape-X-style
SAC and TD3): each environment keeps its own rate for the whole run, from nearly greedy to
strongly exploring, and the run's statistics count the greedier half, whose returns say what
the policy has learned."""

from __future__ import annotations

import numpy as np


class SpreadExploration:
    def __init__(self, values: np.ndarray):
        """`values`: each environment's rate (ε, or a noise scale); lower is greedier."""
        self.values = np.asarray(values, np.float64)
        self.greedy = self.values <= np.median(self.values)

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    def greedier_episodes(self, batch) -> tuple[list, list]:
        """Returns and lengths of the episodes that ended in the greedier half (rate at or below
        the median)."""
        keep = [self.greedy[batch.env_ids[column]] for _, column in batch.episode_ends]
        returns = [r for r, kept in zip(batch.episode_returns, keep) if kept]
        lengths = [n for n, kept in zip(batch.episode_lengths, keep) if kept]
        return returns, lengths


class SpreadEpsilons(SpreadExploration):
    def __init__(self, *, num_envs: int, epsilon: float = 0.4, alpha: float = 7.0):
        """Environment i of N explores with ε_i = epsilon^(1 + alpha i / (N - 1)) (Horgan et al.
        2018: 0.4 and 7, one environment per actor)."""
        super().__init__(epsilon ** (1.0 + alpha * np.arange(num_envs) / max(num_envs - 1, 1)))


class SpreadNoiseScales(SpreadExploration):
    def __init__(self, *, num_envs: int, low: float, high: float):
        """Environment i of N scales its action noise by low (high / low)^(i / (N - 1)): evenly
        spread on a log scale, as Ape-X spreads ε, from `low` to `high` (one environment: their
        geometric mean)."""
        if num_envs == 1:
            super().__init__(np.array([np.sqrt(low * high)]))
        else:
            super().__init__(low * (high / low) ** (np.arange(num_envs) / (num_envs - 1)))
