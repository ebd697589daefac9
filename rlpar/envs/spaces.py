"""What the policy sees and emits, independent of the environment's own space types.

Observations become flat float32 vectors (Discrete observations one-hot). Continuous actions
live in [-1, 1] for the policy and are mapped to the environment's bounds here, so the
same network initialisation suits every Box action space.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class ActionInfo:
    discrete: bool
    size: int  # number of choices (discrete) or action dimensions (continuous)
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    start: int = 0
    shape: tuple[int, ...] = ()


def describe_action_space(space: gym.Space) -> ActionInfo:
    if isinstance(space, gym.spaces.Discrete):
        return ActionInfo(discrete=True, size=int(space.n), start=int(space.start))
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
    raise TypeError(f"unsupported action space {space}; rlpar handles Discrete and Box actions")


class ActionMapper:
    """Maps policy actions (indices, or points of [-1, 1]^d) to what `env.step` expects."""

    def __init__(self, info: ActionInfo):
        self.info = info
        if not info.discrete:
            low, high = np.asarray(info.low), np.asarray(info.high)
            self._bounded = np.isfinite(low) & np.isfinite(high)
            self._all_bounded = bool(self._bounded.all())
            self._low = np.where(self._bounded, low, 0.0)
            self._half_range = np.where(self._bounded, (high - low) / 2.0, 1.0)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        if self.info.discrete:
            return actions.astype(np.int64) + self.info.start
        # np.minimum/np.maximum: np.clip's dispatch costs twice as much on a few numbers (per step)
        clipped = np.minimum(np.maximum(actions, -1.0), 1.0)
        scaled = self._low + (clipped + 1.0) * self._half_range
        if not self._all_bounded:
            scaled = np.where(self._bounded, scaled, actions)
        return scaled.reshape((actions.shape[0],) + self.info.shape).astype(np.float32)


def flatten_observation_fn(space: gym.Space):
    """A function turning a batch of observations from `space` into float32 rows."""
    if isinstance(space, gym.spaces.Box):
        return lambda obs: np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
    if isinstance(space, gym.spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.float32)
        return lambda obs: eye[np.asarray(obs, dtype=np.int64) - int(space.start)]
    raise TypeError(f"unsupported observation space {space}; use a Box or Discrete space")


def observation_dim(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    raise TypeError(f"unsupported observation space {space}; use a Box or Discrete space")
