"""Environments written against the old `gym` API (no gym import needed), for adapter tests."""

import numpy as np


class _Space:
    """Old gym spaces are foreign classes to Gymnasium; these mimic them."""


class Discrete(_Space):
    def __init__(self, n):
        self.n, self.start, self.dtype = n, 0, np.int64


class Box(_Space):
    def __init__(self, low, high, shape):
        self.low = np.full(shape, low, np.float32)
        self.high = np.full(shape, high, np.float32)
        self.shape, self.dtype = shape, np.float32


class OldCorridor:
    """Walk right to the goal at position 5 (terminates, +1); time limit after `limit` steps.

    reset() returns the observation only; step() returns (obs, reward, done, info) and marks
    time-limit ends with info["TimeLimit.truncated"], as old gym's TimeLimit wrapper did.
    """

    def __init__(self, limit=8):
        self.observation_space = Box(0.0, 5.0, (1,))
        self.action_space = Discrete(2)
        self.limit = limit
        self.seeded = None

    def seed(self, seed=None):
        self.seeded = seed
        return [seed]

    def reset(self):
        self.pos, self.t = 0, 0
        return np.array([self.pos], np.float32)

    def step(self, action):
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        self.t += 1
        at_goal = self.pos >= 5
        timeout = self.t >= self.limit and not at_goal
        info = {"TimeLimit.truncated": True} if timeout else {}
        return np.array([self.pos], np.float32), float(at_goal), at_goal or timeout, info
