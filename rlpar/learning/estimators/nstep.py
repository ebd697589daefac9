"""n-step bootstrapped returns (A2C), with the episode-boundary rules of rlpar.learning.estimators.gae.

The n-step return sum_{k<m} gamma^k r_{t+k} + gamma^m V(x_{t+m}) telescopes into the first m of
GAE's TD errors, sum_{k<m} gamma^k delta_{t+k}, plus V(x_t). Summing those TD errors (rather than
the rewards) reuses GAE's boundary handling as it is: no bootstrap after a termination, V(final
observation) after a truncation, `bootstrap_value` at the end of the rollout, nothing on
autoreset steps. The window m is n steps, cut short where the episode or the rollout ends, so
n >= T gives the classic A2C return over the whole rollout, which is GAE with lambda = 1.
"""

from __future__ import annotations

import numpy as np


def compute_nstep_returns(
    *,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    valid: np.ndarray,
    gamma: float,
    n_steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets, both [T, N], like compute_gae, for time-major arrays."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    T = rewards.shape[0]
    next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    not_terminated = 1.0 - terminated.astype(np.float32)
    continues = 1.0 - (terminated | truncated).astype(np.float32)
    deltas = rewards + gamma * next_values * not_terminated - values
    advantages = np.zeros(rewards.shape, dtype=np.float32)
    # in_window[t] is 1 while step t + k still belongs to the episode that step t is in; it starts
    # at 0 on autoreset steps, which are not transitions and get no advantage.
    in_window = valid.astype(np.float32)
    discount = 1.0
    # One pass per offset k, each a vector operation over all steps and environments: n passes
    # instead of a loop over every (step, offset) pair.
    for k in range(min(n_steps, T)):
        advantages[: T - k] += discount * in_window[: T - k] * deltas[k:]
        in_window[: T - k] *= continues[k:]
        discount *= gamma
    returns = advantages + values
    return advantages, returns.astype(np.float32)
