"""Gymnasium spaces and their observations as JSON, for the policy server's requests and the
description an exported model carries (its sidecar file, the server's `GET /`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def space_json(space: gym.Space) -> dict:
    """What a client needs to know of `space`: its type, shape, dtype and bounds (an unbounded
    one as null, which JSON can hold where infinity it cannot)."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
            "low": _finite_or_none(space.low),
            "high": _finite_or_none(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist(), "start": space.start.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "shape": list(space.shape)}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {str(key): space_json(sub) for key, sub in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_json(sub) for sub in space.spaces]}
    return {"type": type(space).__name__}


def _finite_or_none(values: np.ndarray) -> list:
    values = np.asarray(values, np.float64)
    shown = values.astype(object)
    shown[~np.isfinite(values)] = None
    return shown.tolist()


def observation_from_json(space: gym.Space, value: Any):
    """One observation of `space` from its JSON form (lists of numbers, objects for Dict spaces,
    lists for Tuple ones); ValueError naming what does not fit."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict):
            raise ValueError(f"expected an object with keys {list(space.spaces)}, got {type(value).__name__}")
        missing = [key for key in space.spaces if key not in value]
        if missing:
            raise ValueError(f"the observation lacks the key(s) {missing}")
        return {key: observation_from_json(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, list) or len(value) != len(space.spaces):
            raise ValueError(f"expected a list of {len(space.spaces)} observations (a Tuple space)")
        return tuple(observation_from_json(sub, item) for sub, item in zip(space.spaces, value))
    dtype = np.int64 if isinstance(space, gym.spaces.Discrete) else space.dtype
    shape = tuple(space.shape or ())
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError):
        raise ValueError(f"expected numbers of shape {list(shape)}, got {str(value)[:80]}") from None
    if array.shape != shape:
        raise ValueError(f"expected an observation of shape {list(shape)}, got {list(array.shape)}")
    return array
