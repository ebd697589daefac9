"""A picklable description of the policy network, importable without torch."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from rlpar.envs.spaces import ACTION_MASK_KEY, ActionInfo
from rlpar.errors import positive_integers
from rlpar.models.action_masks import input_keep, mask_columns, mask_problem
from rlpar.typed_config import choice, flag, integer, number, text

ACTIVATIONS = ("tanh", "relu", "elu")
ENCODERS = ("auto", "mlp", "nature", "impala", "small")
ACTING = ("auto", "numpy", "numpy32", "torch")
# The numpy copies' arithmetic: float64 is what makes batches identical however environments are
# split over workers; float32 (opt-in) acts faster and gives that guarantee up.
NUMPY_DTYPES = {"numpy": "float64", "numpy32": "float32"}
RECURRENT = ("lstm", "gru")  # model.recurrent; null: feed-forward
NATURE_MIN_SIZE = 36  # the Nature network's 8x8/4, 4x4/2, 3x3/1 convolutions need 36 pixels
TORCH_ACTING_ENCODERS = ("nature", "impala")  # `acting=auto` copies these to torch (measured: acting/numpy_cnn.py)
MODEL_KINDS = {
    "actor_critic": "a policy and its value",
    "q_network": "Q-values",
    "actor_q": "an actor and its Q critics",
}  # kind -> what an algorithm learns with it


def choose_encoder(encoder: str, image_shape: tuple[int, ...]) -> str:
    """`auto`: an MLP for vector rows; for images the Nature DQN network, or a small 3x3
    network for images too small for it (a few-pixel grid world)."""
    if encoder != "auto":
        return encoder
    if not image_shape:
        return "mlp"
    return "nature" if min(image_shape[1:]) >= NATURE_MIN_SIZE else "small"


def choose_acting(acting: str, encoder: str) -> str:
    """`auto`: the numpy float64 copy (bit-identical batches however environments are split over
    workers, and torch-free workers), except for the large CNNs, whose numpy convolutions are
    several times slower per step than torch's (docs/benchmarks.md): a torch float32 copy."""
    if acting != "auto":
        return acting
    return "torch" if encoder in TORCH_ACTING_ENCODERS else "numpy"


def check_image_fields(spec) -> None:
    """The checks PolicySpec and QNetworkSpec share: encoder, acting and image fields."""
    if spec.encoder not in ENCODERS:
        raise ValueError(f"encoder '{spec.encoder}' is not one of {', '.join(ENCODERS)}")
    if spec.encoder not in ("auto", "mlp") and not spec.image_shape:
        raise ValueError(f"encoder '{spec.encoder}' is a CNN for image observations; these are vectors")
    if spec.encoder == "nature" and min(spec.image_shape[1:]) < NATURE_MIN_SIZE:
        raise ValueError(
            f"encoder 'nature' needs images of at least {NATURE_MIN_SIZE}x{NATURE_MIN_SIZE} pixels, "
            f"these are {spec.image_shape[1]}x{spec.image_shape[2]} (use encoder=small or impala)"
        )
    if spec.image_shape and (len(spec.image_shape) != 3 or spec.obs_dim != prod(spec.image_shape)):
        raise ValueError(f"image_shape {spec.image_shape} does not describe rows of {spec.obs_dim} values")
    if spec.acting not in ACTING:
        raise ValueError(f"acting '{spec.acting}' is not one of {', '.join(ACTING)}")
    if spec.acting == "torch" and choose_encoder(spec.encoder, spec.image_shape) == "mlp":
        raise ValueError("acting=torch is for CNN encoders; an MLP acts faster with its numpy copy (acting=numpy)")
    if spec.acting == "numpy32" and spec.recurrent is not None:
        raise ValueError("acting=numpy32 is for feed-forward networks; a recurrent one acts in float64 (acting=numpy)")
    if spec.recurrent is not None and spec.recurrent not in RECURRENT:
        raise ValueError(f"recurrent '{spec.recurrent}' is not one of {', '.join(RECURRENT)} or null")
    if not positive_integers([spec.recurrent_size]):
        raise ValueError(f"recurrent_size: expected a positive integer, got {spec.recurrent_size!r}")
    if spec.normalize_obs and spec.obs_dtype == "uint8":
        raise ValueError(
            "normalize_obs: image observations are scaled to [0, 1] by the network, not whitened "
            "(use normalize_obs=false)"
        )


class NetworkFields:
    """What PolicySpec and QNetworkSpec share: list fields made tuples, the image checks, the
    encoder and acting copy `auto` resolves to, and the model group's rules."""

    kind = "actor_critic"  # what an algorithm's `model_kind` must be to learn with it (MODEL_KINDS)
    # Fields of the dataclass this is mixed into, read here (declared for the type checker):
    hidden_sizes: tuple[int, ...]
    image_shape: tuple[int, ...]
    encoder: str
    acting: str
    recurrent: str | None
    recurrent_size: int
    obs_dim: int
    action: ActionInfo
    observation_keys: tuple[tuple[str, int, int], ...]

    @property
    def mask_columns(self) -> tuple[int, int] | None:
        """The (start, stop) columns of a row holding the action mask (rlpar.models.action_masks),
        or None: no mask (no such Dict key, or `action_mask_key` null)."""
        return mask_columns(self.observation_keys, getattr(self, "action_mask_key", None))

    @property
    def input_keep(self):
        """[obs_dim] 1 for the columns the network reads, 0 for the mask's; None: it reads all."""
        if self.mask_columns is None:
            return None
        key = getattr(self, "action_mask_key", None)
        return input_keep(self.obs_dim, self.observation_keys, key, getattr(self, "mask_as_input", False))

    def _check_action_mask(self) -> None:
        object.__setattr__(self, "observation_keys", tuple(tuple(k) for k in self.observation_keys))
        columns = self.mask_columns
        if columns is not None:
            problem = mask_problem(str(getattr(self, "action_mask_key", "")), columns, self.action)
            if problem:
                raise ValueError(problem)

    @property
    def has_images(self) -> bool:
        """Whether observations are images (a CNN encoder)."""
        return bool(self.image_shape)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """The model group's keys, and whether the chosen algorithm learns this kind of model;
        `config`: a rlpar.config.validate.ConfigView."""
        problems = []
        needed = config.algorithm.get("model_kind")
        if needed and needed != cls.kind:
            problems.append(
                f"model: algo={config.get('algo.name')} learns {MODEL_KINDS.get(needed, needed)} and needs "
                f"model={needed}, got {config.get('model._target_')}"
            )
        hidden = config.get("model.hidden_sizes")
        if "model.hidden_sizes" not in config.unresolved and not positive_integers(hidden):
            problems.append(f"model.hidden_sizes: expected a list of positive integers, got {hidden!r}")
        model = config.get("model") or {}
        if model.get("recurrent") is not None:
            if config.algorithm.get("recurrent_policies") is False:
                problems.append(
                    f"model.recurrent: algo={config.get('algo.name')} learns feed-forward policies only; "
                    f"use model.recurrent=null, or algo={config.algorithms_with('recurrent_policies', True)}"
                )
        return problems

    @classmethod
    def spaces_problem(cls, config, probe) -> str | None:
        """What this model refuses for the probed environment's spaces (a CNN for vectors, images
        too small for the Nature network, ...): its own checks, run before the build."""
        if probe.observation.image_shape and config.get("model.normalize_obs") is True:
            return (
                f"model.normalize_obs: {probe.name} has image observations, which the network scales to [0, 1] "
                f"itself; use normalize_obs=auto or false"
            )
        model = dict(config.get("model") or {})
        if model.get("encoder", "auto") not in ENCODERS or model.get("acting", "auto") not in ACTING:
            return None  # reported as choices
        model.pop("_target_", None)
        if model.get("normalize_obs") == "auto":
            model["normalize_obs"] = False
        layout = probe.agents  # env=pettingzoo: each agent's own row and actions (its action mask among them)
        shapes = {"": {**probe.observation.as_kwargs(), "action": probe.action}}
        if layout is not None:
            shapes = {
                f"agent {agent}: ": {
                    "obs_dim": layout.row_dims[a],
                    "action": layout.actions[a],
                    "observation_keys": layout.row_keys(a),
                }
                for a, agent in enumerate(layout.agents)
            }
        for whose, shape in shapes.items():
            try:
                cls(**model, **shape)
            except ValueError as err:
                return f"model: {whose}{err}"
            except Exception:  # noqa: BLE001 - unknown keys are reported by their own check
                return None
        return None

    def _settle_fields(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))  # a config gives a list
        object.__setattr__(self, "image_shape", tuple(self.image_shape))
        check_image_fields(self)

    @property
    def chosen_encoder(self) -> str:
        return choose_encoder(self.encoder, self.image_shape)

    @property
    def chosen_acting(self) -> str:
        return choose_acting(self.acting, self.chosen_encoder)

    @property
    def acting_dtype(self) -> str:
        """The numpy copy's arithmetic (float64 unless `acting=numpy32`)."""
        return NUMPY_DTYPES.get(self.chosen_acting, "float64")

    @property
    def state_size(self) -> int:
        """Values in one environment's recurrent state (0: feed-forward)."""
        return {"lstm": 2 * self.recurrent_size, "gru": self.recurrent_size}.get(self.recurrent or "", 0)


@dataclass(frozen=True)
class PolicySpec(NetworkFields):
    """Everything needed to rebuild the same network in another process."""

    obs_dim: int
    action: ActionInfo
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = choice("tanh", ACTIVATIONS)
    normalize_obs: bool = choice(False, ("auto", True, False))  # auto: the builder's choice for the spaces
    init_log_std: float = number(0.0)
    encoder: str = choice("auto", ENCODERS)  # see choose_encoder
    obs_dtype: str = "float32"  # the rows' dtype: "uint8" for images (rlpar.envs.spaces.ObservationInfo)
    image_shape: tuple[int, ...] = ()  # (channels, height, width) of image observations
    channels_last: bool = False
    acting: str = choice("auto", ACTING)  # the workers' copy of the network (see choose_acting)
    recurrent: str | None = choice(None, RECURRENT, optional=True)  # an LSTM or GRU core between encoder and heads
    recurrent_size: int = integer(128, low=1)  # the core's hidden units
    # A centralised critic (MAPPO): the actor reads only the first `actor_inputs` values of a row
    # (the agent's own observation), the critic all of it (the global state follows). None: both all.
    actor_inputs: int | None = None
    # The critic predicts returns normalised by their running mean and std (MAPPO's ValueNorm);
    # its outputs are turned back into returns in the network, so acting values stay returns.
    value_norm: bool = flag(False)
    # Invalid-action masks (rlpar.models.action_masks): the Dict observation key holding one (null:
    # none), whether the network also reads it, and the row's Dict keys (from the environment's space)
    action_mask_key: str | None = text(ACTION_MASK_KEY, optional=True)
    mask_as_input: bool = flag(False)
    observation_keys: tuple[tuple[str, int, int], ...] = ()

    def __post_init__(self):
        self._settle_fields()
        self._check_action_mask()
        if (self.actor_inputs is not None or self.value_norm) and (self.recurrent or self.chosen_encoder != "mlp"):
            raise ValueError("actor_inputs and value_norm are offered for the feed-forward MLP actor-critic")
        if self.actor_inputs is not None and not 0 < self.actor_inputs <= self.obs_dim:
            raise ValueError(f"actor_inputs {self.actor_inputs} is not within a row of {self.obs_dim} values")

    def build(self):
        """The trainable torch module (learner side): the MLP actor-critic, the CNN one, or a
        recurrent one over either encoder."""
        if self.recurrent is not None:
            from rlpar.models.modules.recurrent import RecurrentActorCritic

            return RecurrentActorCritic(self)
        if self.chosen_encoder == "mlp":
            from rlpar.models.modules.actor_critic import ActorCritic

            return ActorCritic(self)
        from rlpar.models.modules.cnn import CNNActorCritic

        return CNNActorCritic(self)

    def acting_policy(self, env_ids=None):
        """The copy workers act with. It reads the learner module's state dict (`set_weights`)
        and offers `normalize`, `act` and `value`. numpy (workers never import torch; float32
        with `acting=numpy32`), except with `acting=torch` (what `auto` picks for the nature and
        impala CNNs). `env_ids` (the global ids of the environments it steps) are for policies
        that treat environments differently, not this one."""
        if self.chosen_acting == "torch":
            from rlpar.models.acting.torch_acting import TorchPolicy

            return TorchPolicy(self)
        if self.recurrent is not None:
            from rlpar.models.acting.numpy_recurrent import NumpyRecurrentPolicy

            return NumpyRecurrentPolicy(self)
        if self.chosen_encoder == "mlp":
            from rlpar.models.acting.numpy_policy import NumpyPolicy, NumpyPolicy32

            return NumpyPolicy32(self) if self.chosen_acting == "numpy32" else NumpyPolicy(self)
        from rlpar.models.acting.numpy_cnn import NumpyCNNPolicy

        return NumpyCNNPolicy(self, dtype=self.acting_dtype)
