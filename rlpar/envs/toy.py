"""Small environments of rlpar's own, one per space type it handles beyond Box and Discrete.

Each learns in seconds to a known threshold, so a test (or a user checking an install) can see
that an image, Dict, Tuple, MultiDiscrete or MultiBinary space really trains, not just runs.
Registered as `rlpar/<Name>-v0` when rlpar.envs is imported.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

STEPS_PENALTY = 0.9  # MiniGrid's reward shape: 1 - 0.9 * steps / max_steps on reaching the goal


class PixelGridWorld(gym.Env):
    """Reach the goal on a size x size grid seen as an RGB image (agent red, goal green):
    uint8 (size, size, 3), channels last. Actions: up, down, left, right. Reward on reaching the
    goal, 1 - 0.9 * steps / max_steps; a random walk scores ~0.25 on 5x5, the shortest paths ~0.87."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}
    MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])

    def __init__(self, size: int = 5, max_steps: int = 20, render_mode: str | None = None):
        self.size, self.max_steps, self.render_mode = size, max_steps, render_mode
        self.observation_space = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(4)

    def _image(self) -> np.ndarray:
        image = np.zeros((self.size, self.size, 3), np.uint8)
        image[tuple(self.goal)][1] = 255
        image[tuple(self.agent)][0] = 255
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        cells = self.np_random.choice(self.size * self.size, size=2, replace=False)
        self.agent, self.goal = np.array(divmod(int(cells[0]), self.size)), np.array(divmod(int(cells[1]), self.size))
        self.steps = 0
        return self._image(), {}

    def step(self, action):
        self.agent = np.clip(self.agent + self.MOVES[int(action)], 0, self.size - 1)
        self.steps += 1
        reached = bool((self.agent == self.goal).all())
        reward = 1.0 - STEPS_PENALTY * self.steps / self.max_steps if reached else 0.0
        return self._image(), reward, reached, self.steps >= self.max_steps and not reached, {}

    def render(self):
        return np.kron(self._image(), np.ones((16, 16, 1), np.uint8))  # 16 screen pixels a cell


class DictTarget(gym.Env):
    """Dict observations: {"target": Discrete(n), "distractor": Box(-1, 1, (3,))}; reward 1 when
    the action names the target. Episodes of `length` steps: random 1/n of `length`, learned all."""

    def __init__(self, num_targets: int = 4, length: int = 10):
        self.num_targets, self.length = num_targets, length
        self.observation_space = gym.spaces.Dict(
            {
                "target": gym.spaces.Discrete(num_targets),
                "distractor": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            }
        )
        self.action_space = gym.spaces.Discrete(num_targets)

    def _observe(self):
        self.target = int(self.np_random.integers(self.num_targets))
        return {"target": self.target, "distractor": self.np_random.uniform(-1, 1, 3).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == self.target)
        self.steps += 1
        return self._observe(), reward, False, self.steps >= self.length, {}


class FactoredMatch(gym.Env):
    """Factored actions: copy `nvec`'s targets, one per factor, shown one-hot in a Tuple of
    Discrete observations. Reward: the fraction of factors matched. `binary=True`: MultiBinary
    actions matching a MultiBinary target. Episodes of `length` steps; learned scores `length`."""

    def __init__(self, nvec=(3, 3, 3), binary: bool = False, length: int = 10):
        self.nvec, self.binary, self.length = tuple(nvec), binary, length
        if binary:
            self.observation_space = gym.spaces.Tuple((gym.spaces.MultiBinary(len(nvec)),))
            self.action_space = gym.spaces.MultiBinary(len(nvec))
        else:
            self.observation_space = gym.spaces.Tuple(tuple(gym.spaces.Discrete(n) for n in nvec))
            self.action_space = gym.spaces.MultiDiscrete(list(nvec))

    def _observe(self):
        high = 2 if self.binary else np.asarray(self.nvec)
        self.target = self.np_random.integers(0, high, size=len(self.nvec))
        return (self.target.astype(np.int8),) if self.binary else tuple(int(t) for t in self.target)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(np.mean(np.asarray(action).ravel() == self.target))
        self.steps += 1
        return self._observe(), reward, False, self.steps >= self.length, {}


def register_toy_envs() -> None:
    for name, kwargs in [
        ("PixelGridWorld", {}),
        ("DictTarget", {}),
        ("MultiDiscreteMatch", {}),
        ("MultiBinaryMatch", {"binary": True}),
    ]:
        env_id = f"rlpar/{name}-v0"
        if env_id not in gym.registry:
            target = "FactoredMatch" if name.endswith("Match") else name
            gym.register(env_id, entry_point=f"rlpar.envs.toy:{target}", kwargs=kwargs)
