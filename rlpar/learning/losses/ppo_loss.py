"""Policy-gradient loss pieces (PPO's, A2C's, IMPALA's) as small functions, each testable on its own."""

from __future__ import annotations

import torch


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float):
    """Negative clipped surrogate objective."""
    ratio = (logp - old_logp).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    return -torch.minimum(unclipped, clipped).mean()


@torch.no_grad()
def clip_fraction(logp: torch.Tensor, old_logp: torch.Tensor, clip: float) -> torch.Tensor:
    """Fraction of samples whose probability ratio left [1 - clip, 1 + clip]."""
    return ((logp - old_logp).exp().sub(1.0).abs() > clip).float().mean()


def value_loss(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor, clip: float | None):
    """Half squared error; with `clip`, the pessimistic PPO2 clipped variant."""
    unclipped = (values - returns).pow(2)
    if clip is None:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.maximum(unclipped, (clipped_values - returns).pow(2)).mean()


@torch.no_grad()
def approx_kl(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Low-variance estimator of KL(old || new) (Schulman's k3)."""
    log_ratio = logp - old_logp
    return ((log_ratio.exp() - 1.0) - log_ratio).mean()


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + eps) if x.numel() > 1 else x - x.mean()


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """-E[log pi(a|s) * A]: the advantages are constants (no gradient flows into the critic)."""
    return -(logp * advantages.detach()).mean()
