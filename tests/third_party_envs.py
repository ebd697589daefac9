"""Environments shaped like third-party ones rlpar cannot take as they are."""

import gymnasium as gym
import numpy as np


class TextAndImage(gym.Env):
    """An image with a text instruction beside it (as MiniGrid's mission, BabyAI's)."""

    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (5, 5, 3), np.uint8),
                                         "instruction": gym.spaces.Text(16)})
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}
