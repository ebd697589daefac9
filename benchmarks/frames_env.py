"""A stand-in for image observations: 84x84 frames that cost almost nothing to produce, so a
benchmark measures what acting on large observations costs, not an emulator."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class FramesEnv(gym.Env):
    """Four actions, reward 1 a step, episodes of `episode_steps`; each observation is one of
    eight fixed random frames."""

    def __init__(self, size: int = 84, episode_steps: int = 200):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size, size), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.frames = np.random.default_rng(0).random((8, size, size), dtype=np.float32)
        self.episode_steps, self.t = episode_steps, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0], {}

    def step(self, action):
        self.t += 1
        return self.frames[self.t % 8], 1.0, False, self.t >= self.episode_steps, {}
