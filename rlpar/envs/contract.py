"""What an environment must return, checked on every step: a wrong observation or reward is
named (environment, value, step), never passed on to fail later as a numpy broadcast error, or,
for a string reward, silently converted."""

from __future__ import annotations

import numbers

import gymnasium as gym
import numpy as np

from rlpar.errors import shown

_PLAIN_REWARDS = (float, int, np.float64, np.float32, np.int64, np.int32)  # checked by type alone


def reward_problem(reward) -> str | None:
    """Why `reward` is not one real number, or None."""
    if type(reward) in _PLAIN_REWARDS or isinstance(reward, numbers.Real):
        return None
    if isinstance(reward, np.ndarray) and reward.ndim == 0 and reward.dtype.kind in "biuf":
        return None
    return f"a reward of type {type(reward).__name__} ({shown(reward)}); a reward must be one real number"


def observation_problem(obs, space: gym.Space) -> str | None:
    """Why `obs` does not have the shape `space` declares, or None (values are not checked)."""
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        got = np.shape(obs)
        return (
            None
            if got == space.shape
            else f"an observation of shape {got}, but its observation_space declares {space.shape}"
        )
    if isinstance(space, gym.spaces.Discrete):
        ok = np.ndim(obs) == 0 and isinstance(obs, (numbers.Integral, np.integer, np.ndarray))
        return None if ok else f"an observation {shown(obs)}, but its observation_space {space} declares one integer"
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            return f"an observation with keys {got}, but its observation_space declares {sorted(space.spaces)}"
        return next(
            (
                f"{problem} (key {key!r})"
                for key, sub in space.spaces.items()
                if (problem := observation_problem(obs[key], sub))
            ),
            None,
        )
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple) or len(obs) != len(space.spaces):
            return f"an observation {shown(obs)}, but its observation_space declares a tuple of {len(space.spaces)}"
        return next(
            (
                f"{problem} (item {i})"
                for i, (item, sub) in enumerate(zip(obs, space.spaces))
                if (problem := observation_problem(item, sub))
            ),
            None,
        )
    return None
