"""Native numpy vector envs whose environments each own a random generator.

Gymnasium's numpy CartPole vector env draws every reset from one shared generator, so the
initial states of environment i depend on how many environments share it. rlpar seeds
environment i of a run with `seed + i` wherever it lives; these subclasses keep the native
env's speed and make each environment's resets come from its own generator, so a worker
owning environments [k, k + n) sees exactly what one process owning all of them would.
"""

from __future__ import annotations

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv


class SeededCartPoleVectorEnv(CartPoleVectorEnv):
    def reset(self, *, seed=None, options=None):
        seeds = list(seed) if isinstance(seed, (list, tuple)) else [None if seed is None else seed + i for i in range(self.num_envs)]
        super().reset(seed=seeds[0], options=options)
        self.env_rngs = [np.random.default_rng(s) for s in seeds]
        for i, rng in enumerate(self.env_rngs):
            self.state[:, i] = rng.uniform(self.low, self.high, size=4)
        return self.state.T.astype(np.float32), {}

    def step(self, action):
        resetting = self.prev_done
        self.prev_done = np.zeros_like(resetting)  # keep the parent from resetting with its shared RNG
        obs, reward, terminated, truncated, info = super().step(action)
        if resetting.any():
            for i in np.flatnonzero(resetting):
                self.state[:, i] = self.env_rngs[i].uniform(self.low, self.high, size=4)
            self.steps[resetting] = 0
            reward[resetting] = 0.0
            terminated[resetting] = False
            truncated[resetting] = False
            obs = self.state.T.astype(np.float32)
        self.prev_done = terminated | truncated
        return obs, reward, terminated, truncated, info


# Registered id -> (class, default episode limit) for ids rlpar can vectorise natively per-env-seeded.
SEEDED_NATIVE = {
    "CartPole-v1": (SeededCartPoleVectorEnv, 500),
    "CartPole-v0": (SeededCartPoleVectorEnv, 200),
}
