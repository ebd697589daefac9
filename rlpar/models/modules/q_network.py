"""The trainable Q-network (learner side): an MLP trunk, or a CNN encoder for images
(encoders.py, as in DQN's and Ape-X's Atari agents), and a linear or dueling head.

Dueling (Wang et al. 2016): Q(s, a) = V(s) + A(s, a) - mean_a A(s, a), the value and advantage
streams sharing the trunk. `NumpyQPolicy` reads the same state dict: keep the two in step. MLP:
`trunk.{i}.*`; CNN: `encoder.*` (uint8 rows scaled to [0, 1] here, as in cnn.py); both then
`advantage.*` and `value.*` (dueling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from rlpar.models.modules.encoders import build_encoder, image_batch
from rlpar.models.modules.masks import ActionMasking
from rlpar.models.modules.normalizer import ObservationNormalizer

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.q_spec import QNetworkSpec

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class QNetwork(ActionMasking):
    discrete = True
    recurrent = False  # a recurrent Q-network reads sequences (recurrent.py)
    state_size = 0

    def __init__(self, spec: QNetworkSpec):
        super().__init__()
        self.spec = spec
        # Present for a uniform state dict (workers read it); Q-learning keeps raw observations.
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, False)
        self.image = spec.chosen_encoder != "mlp"
        self.pixels = spec.obs_dtype == "uint8"
        if self.image:
            encoder = build_encoder(spec.chosen_encoder, spec.image_shape, spec.hidden_sizes)
            self.encoder: nn.Module = encoder
            features = encoder.features
        else:
            sizes = [spec.obs_dim, *spec.hidden_sizes]
            layers = []
            for fan_in, fan_out in zip(sizes, sizes[1:]):
                layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[spec.activation]()]
            self.trunk = nn.Sequential(*layers)
            features = sizes[-1]
        self._build_heads(features)
        self._init_action_mask(spec)

    def _build_heads(self, width: int) -> None:
        self.advantage = nn.Linear(width, self.spec.action.size)
        self.value = nn.Linear(width, 1) if self.spec.dueling else None

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        if self.image:
            return self.encoder(image_batch(obs, self.spec.image_shape, self.spec.channels_last))
        if self.pixels:  # image bytes fed to the MLP
            obs = obs.to(self.advantage.weight.dtype) / 255.0
        return self.trunk(self.network_inputs(obs))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values [N, actions]; masked actions' MASKED_LOGIT (masks.py)."""
        return self.masked(self.heads(self.features(obs)), obs)

    def heads(self, features: torch.Tensor) -> torch.Tensor:
        """Q-values [..., actions] of features [..., F]: linear, or dueling."""
        advantage = self.advantage(features)
        value = None if self.value is None else self.value(features)
        if advantage.dtype in (
            torch.bfloat16,
            torch.float16,
        ):  # under autocast (algo.precision): the heads' maths in float32
            advantage, value = advantage.float(), None if value is None else value.float()
        if value is None:
            return advantage
        return value + advantage - advantage.mean(dim=-1, keepdim=True)

    def acting_outputs(self, obs: torch.Tensor) -> tuple[torch.Tensor]:
        """What NumpyQPolicy.outputs computes, for a central inference server on a GPU."""
        return (self(obs),)
