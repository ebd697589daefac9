"""CartPole variants, and a multi-agent simple_spread, that fail for real: raise, kill their process, or hang (for failure tests)."""

import os
import time
from pathlib import Path

import numpy as np

from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper


class _CountingCartPole(CartPoleEnv):
    """CartPole that calls `_fail_maybe()` before each of its steps, counted in `self.steps`."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def step(self, action):
        self.steps += 1
        self._fail_maybe()
        return super().step(action)


class FlakyCartPole(_CountingCartPole):
    """Raises RuntimeError on every `fail_every`-th step of an instance."""

    def __init__(self, fail_every: int = 50):
        super().__init__()
        self.fail_every = fail_every

    def _fail_maybe(self):
        if self.steps % self.fail_every == 0:
            raise RuntimeError(f"simulated simulator crash at step {self.steps}")


class SuicidalCartPole(_CountingCartPole):
    """Ends its own process abruptly (as an out-of-memory kill would) after `die_after` steps."""

    def __init__(self, die_after: int = 20):
        super().__init__()
        self.die_after = die_after

    def _fail_maybe(self):
        if self.steps >= self.die_after:
            os._exit(17)


class HangsOnStartCartPole(CartPoleEnv):
    """Hangs in its constructor while the file `marker` exists (a worker that never comes up)."""

    def __init__(self, marker: str):
        while Path(marker).exists():
            time.sleep(0.1)
        super().__init__()


class UnbuildableCartPole(CartPoleEnv):
    """Its constructor raises outside process `only_in` (the learner's: no worker ever comes up,
    while the learner's own checks of the environment pass), or while the file `unless` exists."""

    def __init__(self, only_in: int | None = None, unless: str | None = None):
        if only_in is not None and os.getpid() != only_in:
            raise RuntimeError(f"this environment cannot be built in process {os.getpid()}")
        if unless is not None and Path(unless).exists():
            raise RuntimeError(f"this environment cannot be built while {unless} exists")
        super().__init__()


class WrongShapeCartPole(CartPoleEnv):
    """Declares CartPole's 4-number observations but returns 3."""

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return obs[:3], info

    def step(self, action):
        obs, *rest = super().step(action)
        return (obs[:3], *rest)


class HugeObservationEnv(CartPoleEnv):
    """A billion-way Discrete observation: one-hot, no run fits it in memory (the space itself is cheap)."""

    def __init__(self):
        super().__init__()
        import gymnasium as gym

        self.observation_space = gym.spaces.Discrete(10**9)


class NaNAfterCartPole(_CountingCartPole):
    """Returns NaN observations from its `nan_after`-th step on (later than validation looks)."""

    def __init__(self, nan_after: int = 100):
        super().__init__()
        self.nan_after = nan_after

    def _fail_maybe(self):
        pass

    def step(self, action):
        obs, *rest = super().step(action)
        if self.steps >= self.nan_after:
            obs = obs * float("nan")
        return (obs, *rest)


_STEPS_IN_THIS_PROCESS = [0]


class BreaksForGoodCartPole(CartPoleEnv):
    """Raises on every step once this process has stepped such environments `break_after` times
    in all: rebuilt ones too (a simulator that has crashed for good)."""

    def __init__(self, break_after: int = 500):
        super().__init__()
        self.break_after = break_after

    def step(self, action):
        _STEPS_IN_THIS_PROCESS[0] += 1
        if _STEPS_IN_THIS_PROCESS[0] > self.break_after:
            raise RuntimeError(f"simulator lost after {self.break_after} steps")
        return super().step(action)


class BadOutputAfterCartPole(_CountingCartPole):
    """From its `after`-th step on returns `what`: an observation of the wrong shape, an array
    reward or a string reward (a contract broken later than validation looks)."""

    def __init__(self, after: int = 100, what: str = "shape"):
        super().__init__()
        self.after, self.what = after, what

    def _fail_maybe(self):
        pass

    def step(self, action):
        obs, reward, *rest = super().step(action)
        if self.steps >= self.after:
            if self.what == "shape":
                obs = obs[:3]
            elif self.what == "array_reward":
                reward = np.array([reward, reward])
            else:
                reward = str(reward)
        return (obs, reward, *rest)



class FlakySpread(BaseParallelWrapper):
    """A PettingZoo Parallel API environment that raises RuntimeError on every `fail_every`-th step
    of an instance; with `break_after`, on every step once this process has stepped such
    environments that many times in all (a simulator lost for good); with `reset_fails`, on every
    reset; with `string_reward_after`, from that step on agent_0's reward is a string."""

    def __init__(self, env, fail_every: int, break_after: int | None = None, reset_fails: bool = False,
                 string_reward_after: int | None = None):
        super().__init__(env)
        self.fail_every, self.break_after, self.reset_fails, self.steps = fail_every, break_after, reset_fails, 0
        self.string_reward_after = string_reward_after

    def reset(self, seed=None, options=None):
        if self.reset_fails:
            raise RuntimeError("simulator cannot start an episode")
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        self.steps += 1
        _STEPS_IN_THIS_PROCESS[0] += 1
        if self.break_after is not None and _STEPS_IN_THIS_PROCESS[0] > self.break_after:
            raise RuntimeError(f"simulator lost after {self.break_after} steps")
        if self.steps % self.fail_every == 0:
            raise RuntimeError(f"simulated simulator crash at step {self.steps}")
        observations, rewards, *rest = super().step(actions)
        if self.string_reward_after is not None and self.steps >= self.string_reward_after:
            rewards = {**rewards, "agent_0": "-1.5"}
        return (observations, rewards, *rest)


def flaky_simple_spread(fail_every: int = 40, break_after: int | None = None, reset_fails: bool = False,
                        string_reward_after: int | None = None, **kwargs) -> FlakySpread:
    """mpe2's simple_spread (`kwargs`: its own), failing as FlakySpread says."""
    from mpe2 import simple_spread_v3

    return FlakySpread(simple_spread_v3.parallel_env(**kwargs), fail_every, break_after, reset_fails,
                       string_reward_after)
