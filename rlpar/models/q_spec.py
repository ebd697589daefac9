"""A picklable description of a Q-network, importable without torch (the `model=q_network` group)."""

from __future__ import annotations

from dataclasses import dataclass

from rlpar.envs.spaces import ACTION_MASK_KEY, ActionInfo, action_space_kind
from rlpar.models.spec import ACTING, ACTIVATIONS, ENCODERS, RECURRENT, NetworkFields
from rlpar.typed_config import choice, flag, integer, text

FACTORED_ACTIONS_REFUSED = (
    "a Q-network needs one Discrete action space; MultiDiscrete/MultiBinary actions train "
    "with algo=ppo, a2c, impala, appo or a3c"
)


@dataclass(frozen=True)
class QNetworkSpec(NetworkFields):
    """Everything needed to rebuild the same Q-network in another process."""

    kind = "q_network"

    @classmethod
    def spaces_problem(cls, config, probe) -> str | None:
        if not probe.action.discrete or probe.action.factored:
            space = probe.action_space
            return (
                f"env: algo={config.get('algo.name')} (a Q-network) cannot take {probe.name}'s "
                f"{type(space).__name__} actions ({space}): it needs one Discrete action space; use "
                f"algo={config.algorithms_with('action_spaces', action_space_kind(space))}"
            )
        return super().spaces_problem(config, probe)

    obs_dim: int
    action: ActionInfo
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = choice("relu", ACTIVATIONS)
    dueling: bool = flag(False)
    normalize_obs: bool = False  # replay keeps raw observations; whitening them is not offered
    encoder: str = choice("auto", ENCODERS)  # rlpar.models.spec.choose_encoder
    obs_dtype: str = "float32"  # the rows' dtype: "uint8" for images (rlpar.envs.spaces.ObservationInfo)
    image_shape: tuple[int, ...] = ()  # (channels, height, width) of image observations
    channels_last: bool = False
    acting: str = choice("auto", ACTING)  # the workers' copy (rlpar.models.spec.choose_acting)
    recurrent: str | None = choice(None, RECURRENT, optional=True)  # R2D2's recurrent Q-network (models.modules)
    recurrent_size: int = integer(128, low=1)
    # Invalid-action masks, as PolicySpec's: masked Q-values are out of argmax, ε-random actions and targets
    action_mask_key: str | None = text(ACTION_MASK_KEY, optional=True)
    mask_as_input: bool = flag(False)
    observation_keys: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self):
        if not self.action.discrete:
            raise ValueError(
                "a Q-network needs a Discrete action space (use algo=ppo, a2c, impala or appo for Box actions)"
            )
        if self.action.factored:
            raise ValueError(FACTORED_ACTIONS_REFUSED)
        self._settle_fields()
        self._check_action_mask()

    def build(self):
        """The trainable torch module (learner side)."""
        if self.recurrent is not None:
            from rlpar.models.modules.recurrent import RecurrentQNetwork

            return RecurrentQNetwork(self)
        from rlpar.models.modules.q_network import QNetwork

        return QNetwork(self)

    def acting_policy(self, env_ids=None):
        """ε-greedy, in numpy (workers never import torch; float32 with `acting=numpy32`) or, for
        the large CNNs, with a torch copy (`acting`); ε comes with the weights, one value or one per
        environment of the run (`env_ids`: the global ids this copy steps)."""
        if self.chosen_acting == "torch":
            from rlpar.models.acting.torch_acting import TorchQPolicy

            return TorchQPolicy(self, env_ids)
        if self.recurrent is not None:
            from rlpar.models.acting.numpy_recurrent import NumpyRecurrentQPolicy

            return NumpyRecurrentQPolicy(self, env_ids)
        from rlpar.models.acting.numpy_q_policy import NumpyQPolicy

        return NumpyQPolicy(self, env_ids, dtype=self.acting_dtype)
