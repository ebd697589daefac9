"""The trainable CNN actor-critic (learner side) for image observations: a convolutional encoder
(encoders.py: nature, impala or small) shared by a linear actor head and a linear critic head,
as in the Atari agents of PPO, IMPALA and CleanRL.

It takes the uint8 rows that workers, batches and replay keep, and scales them to [0, 1] itself
(`image_batch`), so images become floats only here. The acting copies read its state dict:
acting/numpy_cnn.py (numpy, float64) and acting/torch_acting.py.

State dict: `encoder.*` (the encoder's layers), `actor.weight` [A, F], `actor.bias`,
`critic.weight` [1, F], `critic.bias`, `log_std` (Box actions), and `obs_normalizer.*`, present
for a state dict of the same shape as the MLP's but never enabled (images are not whitened).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from rlpar.models.modules.actor_critic import ActorCriticBase
from rlpar.models.modules.encoders import build_encoder, image_batch
from rlpar.models.modules.normalizer import ObservationNormalizer

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.spec import PolicySpec


class CNNActorCritic(ActorCriticBase):
    def __init__(self, spec: PolicySpec):
        super().__init__(spec)
        self.obs_normalizer = ObservationNormalizer(spec.obs_dim, False)
        self.encoder = build_encoder(spec.chosen_encoder, spec.image_shape, spec.hidden_sizes)
        self.actor = nn.Linear(self.encoder.features, spec.action.size)
        self.critic = nn.Linear(self.encoder.features, 1)
        for head, gain in ((self.actor, 0.01), (self.critic, 1.0)):
            nn.init.orthogonal_(head.weight, gain)
            nn.init.zeros_(head.bias)
        self._add_log_std()

    def towers(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor outputs [N, A] and values [N] of uint8 image rows [N, obs_dim]."""
        features = self.encoder(image_batch(obs, self.spec.image_shape, self.spec.channels_last))
        return self.actor(features), self.critic(features)[:, 0]
