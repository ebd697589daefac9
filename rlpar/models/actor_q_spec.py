"""A picklable description of an actor with twin Q critics (SAC, TD3: the `model=actor_q`
group), importable without torch."""

from __future__ import annotations

from dataclasses import dataclass

from rlpar.envs.spaces import ActionInfo, action_space_kind
from rlpar.models.spec import ACTING, ACTIVATIONS, NetworkFields
from rlpar.typed_config import choice, flag, integer, number


@dataclass(frozen=True)
class ActorQSpec(NetworkFields):
    """An MLP actor, a squashed Gaussian (`gaussian`: SAC) or deterministic tanh (TD3), and
    `critics` Q(s, a) MLPs learned together; actions are points of [-1, 1]^d, mapped to the
    environment's bounds by the workers (rlpar.envs.spaces.ActionMapper)."""

    kind = "actor_q"
    torch_inference = False  # central inference acts with the numpy copy of the actor alone, on any device

    @classmethod
    def spaces_problem(cls, config, probe) -> str | None:
        if probe.action.discrete:
            return (
                f"env: algo={config.get('algo.name')} with model=actor_q learns continuous actions and cannot take "
                f"{probe.name}'s {type(probe.action_space).__name__} actions ({probe.action_space}); use "
                f"algo={config.algorithms_with('action_spaces', action_space_kind(probe.action_space))}"
            )
        if probe.observation.image_shape:
            return (
                f"env: algo={config.get('algo.name')}'s actor_q model is an MLP for vector observations; "
                f"{probe.name} gives images (use algo=ppo, impala or appo with a CNN)"
            )
        return super().spaces_problem(config, probe)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """Whether the actor is the one the algorithm learns (SAC: a Gaussian; TD3: deterministic)."""
        problems = super().config_problems(config)
        wants = config.algorithm.get("gaussian_actor")
        gaussian = config.get("model.gaussian")
        if wants is not None and isinstance(gaussian, bool) and gaussian != wants:
            problems.append(
                f"model.gaussian: algo={config.get('algo.name')} learns "
                f"{'a squashed Gaussian' if wants else 'a deterministic'} actor; "
                f"use model.gaussian={str(wants).lower()}"
            )
        return problems

    obs_dim: int
    action: ActionInfo
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = choice("relu", ACTIVATIONS)
    gaussian: bool = flag(True)
    critics: int = integer(2, low=1)  # Q networks; targets take their minimum (clipped double Q, Fujimoto et al. 2018)
    # Exploration noise correlated in time: each environment's standard normals follow an AR(1)
    # process with this coefficient (0: white noise). Consistent pushes in one direction explore
    # tasks that need momentum (MountainCarContinuous) where white noise averages out; the uniform
    # random actions before learning_starts are then persistent too.
    noise_correlation: float = number(0.0, low=0, high=1, high_open=True)
    normalize_obs: bool = False  # replay keeps raw observations; whitening them is not offered
    encoder: str = "mlp"
    obs_dtype: str = "float32"
    image_shape: tuple[int, ...] = ()
    channels_last: bool = False
    acting: str = choice("numpy", ACTING)
    recurrent: str | None = None
    recurrent_size: int = 128
    observation_keys: tuple[tuple[str, int, int], ...] = ()  # a Dict space's keys; no action masks for Box actions

    def __post_init__(self):
        if self.action.discrete:
            raise ValueError(
                "an actor_q model needs a Box action space (use algo=dqn, apex or ppo for discrete actions)"
            )
        if self.image_shape or self.encoder not in ("auto", "mlp"):
            raise ValueError("an actor_q model is an MLP for vector observations")
        if self.recurrent is not None:
            raise ValueError("an actor_q model is feed-forward (model.recurrent=null)")
        if self.acting not in ("auto", "numpy", "numpy32"):
            raise ValueError("an actor_q model acts with its numpy copy (model.acting=numpy, or numpy32 for float32)")
        if self.normalize_obs:
            raise ValueError("normalize_obs: an actor_q model learns from raw replayed observations (use false)")
        if not 0.0 <= self.noise_correlation < 1.0:
            raise ValueError(f"noise_correlation: {self.noise_correlation} is not in [0, 1)")
        self._settle_fields()

    def build(self):
        """The trainable torch module (learner side)."""
        from rlpar.models.modules.actor_q import ActorQ

        return ActorQ(self)

    def acting_policy(self, env_ids=None):
        """The actor alone, in numpy (float32 with `acting=numpy32`); its noise scale (one, or one per
        environment of the run: `env_ids` are the global ids this copy steps) comes with the weights."""
        from rlpar.models.acting.numpy_actor import NumpyActor

        return NumpyActor(self, env_ids, dtype=self.acting_dtype)
