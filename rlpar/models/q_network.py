"""The trainable Q-network (learner side): an MLP trunk and a linear or dueling head.

Dueling (Wang et al. 2016): Q(s, a) = V(s) + A(s, a) - mean_a A(s, a), the value and advantage
streams sharing the trunk. `NumpyQPolicy` reads the same state dict: keep the two in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from rlpar.models.normalizer import ObservationNormalizer

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.q_spec import QNetworkSpec

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class QNetwork(nn.Module):
    discrete = True

    def __init__(self, spec: QNetworkSpec):
        super().__init__()
        self.spec = spec
        # Present for a uniform state dict (workers read it); Q-learning keeps raw observations.
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, False)
        sizes = [spec.obs_dim, *spec.hidden_sizes]
        layers = []
        for fan_in, fan_out in zip(sizes, sizes[1:]):
            layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[spec.activation]()]
        self.trunk = nn.Sequential(*layers)
        self.advantage = nn.Linear(sizes[-1], spec.action.size)
        self.value = nn.Linear(sizes[-1], 1) if spec.dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values [N, actions]."""
        features = self.trunk(obs)
        advantage = self.advantage(features)
        if self.value is None:
            return advantage
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)

    def acting_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor]:
        """What NumpyQPolicy.outputs computes, for a central inference server on a GPU."""
        return (self(obs),)
