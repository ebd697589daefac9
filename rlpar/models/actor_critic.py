"""The trainable actor-critic (learner side): separate MLPs, categorical or diagonal Gaussian.

Workers act with `NumpyPolicy`, which reads this module's state dict; keep the layer naming
(`actor.{i}`, `critic.{i}`, `log_std`, `obs_normalizer.*`) in step with it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from rlpar.models.normalizer import ObservationNormalizer
from rlpar.models.spec import PolicySpec

ACTIVATION_MODULES = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _mlp(sizes, activation: str, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, out_gain if last else np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not last:
            layers.append(ACTIVATION_MODULES[activation]())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        hidden = list(spec.hidden_sizes)
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, spec.normalize_obs)
        self.actor = _mlp([spec.obs_dim, *hidden, spec.action.size], spec.activation, 0.01)
        self.critic = _mlp([spec.obs_dim, *hidden, 1], spec.activation, 1.0)
        self.discrete = spec.action.discrete
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((spec.action.size,), float(spec.init_log_std)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor):
        """Log-probabilities, entropies and values of already-normalised observations.

        Written out by hand rather than through torch.distributions: the same maths with a
        fraction of the per-call overhead, which dominates for minibatches of small MLPs.
        """
        out = self.actor(obs)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            log_std = self.log_std.expand_as(out)
            z = (actions - out) * torch.exp(-log_std)
            logp = (-0.5 * z.pow(2) - log_std - LOG_SQRT_2PI).sum(-1)
            entropy = (0.5 + LOG_SQRT_2PI + log_std).sum(-1)
        return logp, entropy, self.value(obs)
