"""Environments that checkpoints cannot hold whole: a class defined inside its factory function, as
users often write one (`Can't pickle local object`), one that becomes unpicklable while it trains,
and an EzPickle one with a part that cannot be pickled."""

import threading

from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.utils.ezpickle import EzPickle


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


class Odometer(CartPoleEnv, EzPickle):
    """CartPole pickled by Gymnasium's EzPickle (its constructor's arguments only), counting its
    steps in a part that points back at it, and holding a lock its constructor makes anew."""

    def __init__(self, start: int = 0):
        CartPoleEnv.__init__(self)
        EzPickle.__init__(self, start)
        self.dial = Dial(self, start)
        self.lock = threading.Lock()

    def step(self, action):
        self.dial.count += 1
        return CartPoleEnv.step(self, action)


class Dial:
    def __init__(self, owner: Odometer, count: int):
        self.owner, self.count = owner, count
