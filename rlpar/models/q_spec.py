"""A picklable description of a Q-network, importable without torch (the `model=q_network` group)."""

from __future__ import annotations

from dataclasses import dataclass

from rlpar.envs.spaces import ActionInfo


@dataclass(frozen=True)
class QNetworkSpec:
    """Everything needed to rebuild the same Q-network in another process."""

    obs_dim: int
    action: ActionInfo
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    dueling: bool = False
    normalize_obs: bool = False  # replay keeps raw observations; whitening them is not offered

    def __post_init__(self):
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))  # a config gives a list
        if not self.action.discrete:
            raise ValueError("a Q-network needs a Discrete action space (use algo=ppo, a2c, impala or appo for Box actions)")

    def build(self):
        """The trainable torch module (learner side)."""
        from rlpar.models.q_network import QNetwork

        return QNetwork(self)

    def acting_policy(self, env_ids=None):
        """ε-greedy in numpy (workers never import torch); ε comes with the weights, one value or
        one per environment of the run (`env_ids`: the global ids this copy steps)."""
        from rlpar.models.numpy_q_policy import NumpyQPolicy

        return NumpyQPolicy(self, env_ids)
