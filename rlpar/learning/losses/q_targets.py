"""Q-learning targets and loss pieces, each testable on its own."""

from __future__ import annotations

import torch


def q_targets(rewards, discounts, next_q_target, next_q_online=None):
    """r + discount * Q_target(s', a*), with a* = argmax_a Q_online(s', a) (double Q-learning,
    van Hasselt et al. 2016) when the online network's values are given, else argmax of the
    target network's own (classic DQN). `discounts` is gamma^k for k-step returns, 0 after a
    termination."""
    chooser = next_q_target if next_q_online is None else next_q_online
    best = chooser.argmax(dim=1, keepdim=True)
    return rewards + discounts * next_q_target.gather(1, best).squeeze(1)


def weighted_huber(td_errors: torch.Tensor, weights: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Mean of importance weights x Huber(td): quadratic within `delta`, linear beyond, so a
    single large error cannot blow up the gradient."""
    absolute = td_errors.abs()
    quadratic = absolute.clamp(max=delta)
    return (weights * (0.5 * quadratic.square() + delta * (absolute - quadratic))).mean()
