"""A picklable description of the policy network, importable without torch."""

from __future__ import annotations

from dataclasses import dataclass

from rlpar.envs.spaces import ActionInfo

ACTIVATIONS = ("tanh", "relu", "elu")


@dataclass(frozen=True)
class PolicySpec:
    """Everything needed to rebuild the same network in another process."""

    obs_dim: int
    action: ActionInfo
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    normalize_obs: bool = False
    init_log_std: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))  # a config gives a list

    def build(self):
        """The trainable torch module (learner side)."""
        from rlpar.models.actor_critic import ActorCritic

        return ActorCritic(self)

    def acting_policy(self, env_ids=None):
        """The copy workers act with: numpy only, so workers never import torch. It reads the
        learner module's state dict (`set_weights`) and offers `normalize`, `act` and `value`;
        `env_ids` (the global ids of the environments it steps) are for policies that treat
        environments differently, not this one."""
        from rlpar.models.numpy_policy import NumpyPolicy

        return NumpyPolicy(self)
