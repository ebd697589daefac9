"""The unit of data between samplers and learners: a time-major rollout of many environments."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TIME_MAJOR_FIELDS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "valid")


@dataclass
class Batch:
    """Arrays are [T, N, ...]: T steps of N environments.

    `obs` are already normalised with the statistics the policy acted with. `valid` is False on
    Gymnasium's autoreset steps, which are not transitions and must not be trained on.
    `bootstrap_value` is V(observation after the last step), one per environment.
    """

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    bootstrap_value: np.ndarray
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    raw_obs_moments: tuple[np.ndarray, np.ndarray, int] | None = None
    policy_version: int = 0

    @property
    def num_steps(self) -> int:
        """Environment steps taken to collect this batch (autoreset steps included)."""
        return int(self.rewards.size)

    @staticmethod
    def concat(batches: list["Batch"]) -> "Batch":
        """Join workers' batches along the environment axis, in worker order."""
        if len(batches) == 1:
            return batches[0]
        joined = {name: np.concatenate([getattr(b, name) for b in batches], axis=1) for name in TIME_MAJOR_FIELDS}
        return Batch(
            **joined,
            bootstrap_value=np.concatenate([b.bootstrap_value for b in batches]),
            episode_returns=[r for b in batches for r in b.episode_returns],
            episode_lengths=[n for b in batches for n in b.episode_lengths],
            raw_obs_moments=merge_moments([b.raw_obs_moments for b in batches]),
            policy_version=min(b.policy_version for b in batches),
        )


def merge_moments(moments):
    """Combine (mean, var, count) triples of disjoint samples into one."""
    moments = [m for m in moments if m is not None and m[2] > 0]
    if not moments:
        return None
    total = sum(m[2] for m in moments)
    mean = sum(m[0] * m[2] for m in moments) / total
    var = sum((m[1] + (m[0] - mean) ** 2) * m[2] for m in moments) / total
    return mean, var, total
