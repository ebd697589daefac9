"""Generalised advantage estimation that respects how Gymnasium vector envs end episodes.

Per step t of one environment:
  * terminated: the episode really ended, no bootstrap;
  * truncated: cut by a time limit; bootstrap from V(final observation). With next-step
    autoreset the final observation is what the env returned, i.e. the observation of step
    t + 1 (the autoreset step), so `values[t + 1]` (or `bootstrap_value`) is exactly it;
  * invalid (autoreset step): not a transition; advantage 0 and excluded from the loss.
Advantages never flow across an episode boundary.
"""

from __future__ import annotations

import numpy as np


def compute_gae(
    *,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets, both [T, N], for time-major arrays."""
    T = rewards.shape[0]
    advantages = np.zeros(rewards.shape, dtype=np.float32)
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    not_terminated = 1.0 - terminated.astype(np.float32)
    continues = 1.0 - (terminated | truncated).astype(np.float32)
    deltas = rewards + gamma * next_values * not_terminated - values
    carry = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in range(T - 1, -1, -1):
        carry = np.where(valid[t], deltas[t] + gamma * gae_lambda * continues[t] * carry, 0.0)
        advantages[t] = carry
    returns = advantages + values
    return advantages, returns.astype(np.float32)
