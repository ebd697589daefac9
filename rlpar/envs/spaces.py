"""What the policy sees and emits, independent of the environment's own space types.

Observations become flat rows: float32 vectors for vector-like spaces (Discrete and
MultiDiscrete one-hot, Dict and Tuple concatenated per key in the space's order), and the raw
bytes of uint8 images, which stay uint8 in workers, batches, shared memory and replay and become
floats only in the learner's network. Continuous actions live in [-1, 1] for the policy and are
mapped to the environment's bounds here, so the same network initialisation suits every Box
action space. MultiDiscrete and MultiBinary actions are factorised categoricals (MultiBinary: two
choices per bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard, cast

import gymnasium as gym
import numpy as np

# The Dict observation key of a 0/1 mask of the legal actions, where PettingZoo's classic games and
# many Gymnasium environments put it (the model's `action_mask_key` by default: rlpar.models.action_masks)
ACTION_MASK_KEY = "action_mask"
SUPPORTED_OBSERVATIONS = "Box, Discrete, MultiDiscrete, MultiBinary, and Dict or Tuple of these"
SUPPORTED_ACTIONS = "Discrete, Box, MultiDiscrete and MultiBinary"


@dataclass(frozen=True)
class ActionInfo:
    discrete: bool  # integer actions: Discrete, MultiDiscrete, MultiBinary
    size: int  # choices (Discrete), choices of all factors together (factored) or dimensions (Box)
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    start: int = 0
    shape: tuple[int, ...] = ()
    nvec: tuple[int, ...] = ()  # choices per factor of a MultiDiscrete or MultiBinary action
    starts: tuple[int, ...] = ()  # the first value of each factor (MultiDiscrete's `start`)
    env_dtype: str = "int64"  # what `env.step` takes for integer actions

    @property
    def factored(self) -> bool:
        return bool(self.nvec)


def action_space_kind(space: gym.Space) -> str:
    """The Gymnasium class of an action space rlpar takes ("Discrete", "MultiDiscrete", "MultiBinary"
    or "Box"), as algorithms declare what they learn (`Algorithm.action_spaces`)."""
    kinds = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box)
    return next((kind.__name__ for kind in kinds if isinstance(space, kind)), type(space).__name__)


def describe_action_space(space: gym.Space) -> ActionInfo:
    if isinstance(space, gym.spaces.Discrete):
        return ActionInfo(discrete=True, size=int(space.n), start=int(space.start))
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(space.nvec).ravel())
        starts = tuple(int(s) for s in np.broadcast_to(space.start, space.nvec.shape).ravel())
        return ActionInfo(
            discrete=True,
            size=sum(nvec),
            shape=tuple(space.shape),
            nvec=nvec,
            starts=starts,
            env_dtype=np.dtype(space.dtype).name,
        )
    if isinstance(space, gym.spaces.MultiBinary):
        bits = int(np.prod(space.shape))
        return ActionInfo(
            discrete=True,
            size=2 * bits,
            shape=tuple(space.shape),
            nvec=(2,) * bits,
            starts=(0,) * bits,
            env_dtype=np.dtype(space.dtype).name,
        )
    if isinstance(space, gym.spaces.Box):
        low = np.broadcast_to(space.low, space.shape).astype(np.float64).ravel()
        high = np.broadcast_to(space.high, space.shape).astype(np.float64).ravel()
        return ActionInfo(
            discrete=False,
            size=int(np.prod(space.shape)),
            low=tuple(low.tolist()),
            high=tuple(high.tolist()),
            shape=tuple(space.shape),
        )
    raise TypeError(f"unsupported action space {space}; rlpar handles {SUPPORTED_ACTIONS} actions")


def factor_columns(action: ActionInfo) -> np.ndarray | None:
    """Where each factor's choices sit among a factored action's logits [N, size], for both
    the learner's network and the acting copies: None when every factor has as many choices (the
    logits reshape to [N, F, n]); otherwise [F, max n] column indices, with `size` (one past the
    last column, where the caller appends a padding column of probability 0) beyond a factor's
    own choices."""
    nvec = np.asarray(action.nvec, np.int64)
    if (nvec == nvec[0]).all():
        return None
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    width = int(nvec.max())
    return np.where(np.arange(width) < nvec[:, None], offsets[:, None] + np.arange(width), action.size)


def action_layout(action: ActionInfo, leading: tuple[int, ...]) -> tuple[tuple[int, ...], type]:
    """Shape and dtype of the policy's actions for `leading` dimensions (e.g. [T, N])."""
    if action.factored:
        return (*leading, len(action.nvec)), np.int64
    if action.discrete:
        return tuple(leading), np.int64
    return (*leading, action.size), np.float32


def noise_layout(action: ActionInfo, leading: tuple[int, ...]) -> tuple[tuple[int, ...], type]:
    """Shape and dtype of the acting noise: a uniform per categorical draw, a standard normal per
    continuous dimension."""
    if action.factored:
        return (*leading, len(action.nvec)), np.float64
    if action.discrete:
        return tuple(leading), np.float64
    return (*leading, action.size), np.float32


def draw_noise(generator: np.random.Generator, action: ActionInfo, steps: int) -> np.ndarray:
    """One environment's noise for `steps` steps, from its own generator."""
    shape, _ = noise_layout(action, (steps,))
    return generator.random(shape) if action.discrete else generator.standard_normal(shape)


class ActionMapper:
    """Maps policy actions (indices, index vectors, or points of [-1, 1]^d) to what `env.step` expects."""

    def __init__(self, info: ActionInfo):
        self.info = info
        if info.factored:
            self._starts = np.asarray(info.starts, np.int64)
            self._any_start = bool(self._starts.any())
        elif not info.discrete:
            low, high = np.asarray(info.low), np.asarray(info.high)
            self._bounded = np.isfinite(low) & np.isfinite(high)
            self._all_bounded = bool(self._bounded.all())
            self._low = np.where(self._bounded, low, 0.0)
            self._half_range = np.where(self._bounded, (high - low) / 2.0, 1.0)

    @property
    def box_scaling(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(low, half range, bounded) per dimension of a Box action: what `to_env` applies to the
        clipped policy action on bounded dimensions, for a graph that applies it itself
        (rlpar.serving.export)."""
        return self._low, self._half_range, self._bounded

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        if self.info.factored:
            values = actions + self._starts if self._any_start else actions
            return values.reshape((actions.shape[0],) + self.info.shape).astype(self.info.env_dtype)
        if self.info.discrete:  # no copy for int64 indices from 0 (a call less per step)
            actions = actions.astype(np.int64, copy=False)
            return actions + self.info.start if self.info.start else actions
        # np.minimum/np.maximum: np.clip's dispatch costs twice as much on a few numbers (per step)
        clipped = np.minimum(np.maximum(actions, -1.0), 1.0)
        scaled = self._low + (clipped + 1.0) * self._half_range
        if not self._all_bounded:
            scaled = np.where(self._bounded, scaled, actions)
        return scaled.reshape((actions.shape[0],) + self.info.shape).astype(np.float32)


@dataclass(frozen=True)
class ObservationInfo:
    """How an observation space becomes the flat rows the policy reads (the PolicySpec fields)."""

    obs_dim: int  # length of a row
    obs_dtype: str = "float32"  # "uint8" for images: their bytes, unscaled
    image_shape: tuple[int, ...] = ()  # (channels, height, width) of an image; () for vector rows
    channels_last: bool = False  # an image row is ordered height, width, channels (as the env gives it)
    # A Dict space's keys and the columns of a row each fills, (key, start, stop) in the row's order:
    # how a model finds an action mask among them (rlpar.models.action_masks)
    keys: tuple[tuple[str, int, int], ...] = ()

    def as_kwargs(self) -> dict:
        return {
            "obs_dim": self.obs_dim,
            "obs_dtype": self.obs_dtype,
            "image_shape": self.image_shape,
            "channels_last": self.channels_last,
            "observation_keys": self.keys,
        }


def is_image_space(space: gym.Space) -> TypeGuard[gym.spaces.Box]:
    """uint8 Boxes of rank 2 (one channel) or 3 (channels first or last) are images."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def describe_observation_space(space: gym.Space) -> ObservationInfo:
    if is_image_space(space):
        shape = tuple(int(s) for s in space.shape)
        if len(shape) == 2:
            return ObservationInfo(obs_dim=int(np.prod(shape)), obs_dtype="uint8", image_shape=(1, *shape))
        channels_last = shape[2] < shape[0]  # (84, 84, 4) or (96, 96, 3); (4, 84, 84) is channels first
        image_shape = (shape[2], shape[0], shape[1]) if channels_last else shape
        return ObservationInfo(
            obs_dim=int(np.prod(shape)), obs_dtype="uint8", image_shape=image_shape, channels_last=channels_last
        )
    return ObservationInfo(obs_dim=observation_dim(space), keys=dict_key_columns(space))


def dict_key_columns(space: gym.Space) -> tuple[tuple[str, int, int], ...]:
    """(key, start, stop) of each key of a Dict space within its flat rows (`_float_rows_fn`
    concatenates them in the space's order); () for other spaces."""
    if not isinstance(space, gym.spaces.Dict):
        return ()
    columns, start = [], 0
    for key, sub in space.spaces.items():
        stop = start + observation_dim(sub)
        columns.append((str(key), start, stop))
        start = stop
    return tuple(columns)


def whitened_by_default(space: gym.Space) -> bool:
    """What `normalize_obs=auto` whitens: a Box of values of any scale, alone or inside a Dict or
    Tuple (an image inside one is flattened with the rest, so whitened too); not a lone image,
    which the CNN scales, nor one-hot rows."""
    if isinstance(space, gym.spaces.Box):
        return not is_image_space(space)
    if isinstance(space, gym.spaces.Dict):
        subspaces = list(space.spaces.values())
    elif isinstance(space, gym.spaces.Tuple):
        subspaces = list(space.spaces)
    else:
        return False
    return any(isinstance(sub, gym.spaces.Box) or whitened_by_default(sub) for sub in subspaces)


def _leaf_problem(space: gym.Space) -> str | None:
    if isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return None
    if isinstance(space, gym.spaces.Dict):
        return next(filter(None, map(_leaf_problem, space.spaces.values())), None)
    if isinstance(space, gym.spaces.Tuple):
        return next(filter(None, map(_leaf_problem, space.spaces)), None)
    return f"unsupported observation space {space}; rlpar handles {SUPPORTED_OBSERVATIONS}"


def supported_observation_space(space: gym.Space) -> bool:
    """Whether rlpar takes observations from `space` (no text, graphs or sequences inside)."""
    return _leaf_problem(space) is None


def flatten_observation_fn(space: gym.Space):
    """A function turning a batch of observations from `space` into rows (uint8 for images,
    float32 otherwise)."""
    problem = _leaf_problem(space)
    if problem:
        raise TypeError(problem)
    if is_image_space(space):
        return lambda obs: np.asarray(obs, dtype=np.uint8).reshape(len(obs), -1)
    return _float_rows_fn(space)


def _float_rows_fn(space: gym.Space):
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return lambda obs: np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    if isinstance(space, gym.spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.float32)
        return lambda obs: eye[np.asarray(obs, dtype=np.int64) - int(space.start)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, np.int64).ravel()
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        start = np.broadcast_to(space.start, space.nvec.shape).ravel().astype(np.int64)

        def one_hot(obs):
            index = np.asarray(obs, np.int64).reshape(len(obs), -1) - start + offsets
            rows = np.zeros((len(obs), int(nvec.sum())), np.float32)
            np.put_along_axis(rows, index, 1.0, axis=1)
            return rows

        return one_hot
    if isinstance(space, gym.spaces.Dict):
        parts = [(key, _float_rows_fn(sub)) for key, sub in space.spaces.items()]
        return lambda obs: np.concatenate([part(obs[key]) for key, part in parts], axis=1)
    in_order = [_float_rows_fn(sub) for sub in cast(gym.spaces.Tuple, space).spaces]  # Tuple
    return lambda obs: np.concatenate([part(obs[i]) for i, part in enumerate(in_order)], axis=1)


def observation_dim(space: gym.Space) -> int:
    problem = _leaf_problem(space)
    if problem:
        raise TypeError(problem)
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.asarray(space.nvec).sum())
    if isinstance(space, gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    subspaces = space.spaces.values() if isinstance(space, gym.spaces.Dict) else cast(gym.spaces.Tuple, space).spaces
    return sum(observation_dim(sub) for sub in subspaces)
