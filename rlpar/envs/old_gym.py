"""Adapter for environments written against the pre-0.26 `gym` API.

Old environments return `obs` from `reset()` and `(obs, reward, done, info)` from `step()`.
`done` mixes termination and time limits; the old `TimeLimit` wrapper flagged the latter with
`info["TimeLimit.truncated"]`, which is the only way to tell them apart, so we honour it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class OldGymAdapter(gym.Env):
    """Presents an old-API environment as a Gymnasium environment."""

    def __init__(self, env):
        self.env = env
        self.observation_space = _to_gymnasium_space(env.observation_space)
        self.action_space = _to_gymnasium_space(env.action_space)
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            if hasattr(self.env, "seed"):
                self.env.seed(seed)
            for space in (self.env.action_space, self.env.observation_space):
                if hasattr(space, "seed"):
                    space.seed(seed)
        result = self.env.reset()
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
            return result  # already new-style reset
        return result, {}

    def step(self, action):
        result = self.env.step(action)
        if len(result) == 5:
            return result
        obs, reward, done, info = result
        truncated = bool(done and info.get("TimeLimit.truncated", False))
        terminated = bool(done and not truncated)
        return obs, float(reward), terminated, truncated, info

    def render(self):
        return self.env.render()

    def close(self):
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


def _to_gymnasium_space(space):
    """Old `gym` spaces quack like Gymnasium's but fail isinstance checks; rebuild the common ones."""
    if isinstance(space, gym.spaces.Space):
        return space
    kind = type(space).__name__
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if kind == "Box":
        return gym.spaces.Box(low=np.asarray(space.low), high=np.asarray(space.high), dtype=np.dtype(space.dtype))
    raise TypeError(f"unsupported old-gym space {kind}; only Discrete and Box are adapted")


def looks_like_old_gym(env) -> bool:
    """Probe an environment once: old-API `reset()` returns a single observation."""
    probe = env.reset()
    return not (isinstance(probe, tuple) and len(probe) == 2 and isinstance(probe[1], dict))
