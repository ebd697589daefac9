"""CartPole variants that fail for real: raise, kill their process, or hang (for failure tests)."""

import os
import time
from pathlib import Path

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class FlakyCartPole(CartPoleEnv):
    """Raises RuntimeError on every `fail_every`-th step of an instance."""

    def __init__(self, fail_every: int = 50):
        super().__init__()
        self.fail_every = fail_every
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps % self.fail_every == 0:
            raise RuntimeError(f"simulated simulator crash at step {self.steps}")
        return super().step(action)


class SuicidalCartPole(CartPoleEnv):
    """Ends its own process abruptly (as an out-of-memory kill would) after `die_after` steps."""

    def __init__(self, die_after: int = 20):
        super().__init__()
        self.die_after = die_after
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps >= self.die_after:
            os._exit(17)
        return super().step(action)


class HangsOnStartCartPole(CartPoleEnv):
    """Hangs in its constructor while the file `marker` exists (a worker that never comes up)."""

    def __init__(self, marker: str):
        while Path(marker).exists():
            time.sleep(0.1)
        super().__init__()
