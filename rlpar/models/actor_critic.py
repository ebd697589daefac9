"""The trainable actor-critic (learner side): two MLP towers, categorical or diagonal Gaussian.

The actor and the critic are separate networks (no shared layers), but their weights are stored
stacked, `layer{i}.weight` of shape [2, in, out] (tower 0 actor, tower 1 critic), so each layer of
both runs as one batched matmul. With small MLPs per-op overhead dominates, and this halves the
number of ops in the forward and backward passes (about 30% faster updates here). The last
layer is padded to max(num_actions, 1) outputs; the padding is never read, gets zero gradients
and so never changes. `NumpyPolicy` reads the same state dict: keep the two in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

import torch
from torch import nn

from rlpar.models.normalizer import ObservationNormalizer

if TYPE_CHECKING:  # the spec builds these classes: importing it here would be a circle
    from rlpar.models.spec import PolicySpec

ACTIVATION_FUNCTIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu}
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
ACTOR, CRITIC = 0, 1


class ActorCritic(nn.Module):
    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        self.discrete = spec.action.discrete
        self.num_outputs = spec.action.size
        self.activation = ACTIVATION_FUNCTIONS[spec.activation]
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, spec.normalize_obs)
        sizes = [spec.obs_dim, *spec.hidden_sizes, max(spec.action.size, 1)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i in range(len(sizes) - 1):
            last = i == len(sizes) - 2
            weight = torch.empty(2, sizes[i], sizes[i + 1])
            gains = (0.01, 1.0) if last else (math.sqrt(2), math.sqrt(2))
            for tower, gain in enumerate(gains):
                nn.init.orthogonal_(weight[tower], gain)
            if last:
                weight[CRITIC, :, 1:] = 0.0  # padding columns of the value head
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(torch.zeros(2, 1, sizes[i + 1])))
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((spec.action.size,), float(spec.init_log_std)))

    def towers(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor outputs [N, A] and values [N] of already-normalised observations."""
        x = obs.unsqueeze(0).expand(2, *obs.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self.activation(x)
        return x[ACTOR, :, : self.num_outputs], x[CRITIC, :, 0]

    def acting_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What NumpyPolicy.outputs computes, for a central inference server on a GPU."""
        return self.towers(obs)

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor, with_entropy: bool = True):
        """Log-probabilities, entropies (None unless asked) and values, written out by hand:
        torch.distributions does the same maths with several times the per-call overhead."""
        out, values = self.towers(obs)
        entropy = None
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            z = (actions - out) * torch.exp(-self.log_std)
            logp = (-0.5 * z.pow(2)).sum(-1) - (self.log_std.sum() + LOG_SQRT_2PI * self.num_outputs)
            if with_entropy:
                entropy = (0.5 + LOG_SQRT_2PI + self.log_std).sum().expand(len(obs))
        return logp, entropy, values
