"""Environments that checkpoints cannot hold: a class defined inside its factory function, as users
often write one (`Can't pickle local object`), and one that becomes unpicklable while it trains."""

import threading

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


def local_cartpole(**kwargs):
    """CartPole from a class that exists only inside this function (what env.entry_point names)."""

    class LocalCartPole(CartPoleEnv):
        pass

    return LocalCartPole(**kwargs)


class LateUnpicklableCartPole(CartPoleEnv):
    """CartPole that opens something unpicklable (a lock, as a lazy connection would hold) after
    `unpicklable_after` steps: the start-up probe pickles it fine, the first checkpoint cannot."""

    def __init__(self, unpicklable_after: int = 100):
        super().__init__()
        self.unpicklable_after = unpicklable_after
        self.steps = 0
        self.connection = None

    def step(self, action):
        self.steps += 1
        if self.steps == self.unpicklable_after:
            self.connection = threading.Lock()
        return super().step(action)
