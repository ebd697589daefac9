"""Survive an exception inside one environment without losing the worker that steps it.

A simulator that crashes now and then (a physics blow-up, a lost connection to an external
program) should cost one episode, not the run. The failed environment is closed and built again;
the failing step is reported as a truncation at the last good observation, so the learner
bootstraps from it as it would at a time limit, and the vector env's autoreset starts a new
episode in the rebuilt environment. Each rebuild is counted (`restarts`, logged as
`env_restarts`).
"""

from __future__ import annotations

import logging
from typing import Callable

import gymnasium as gym

log = logging.getLogger("rlpar")

RESET_ATTEMPTS = 3  # rebuilds tried in a row before a reset error is passed on
RESEED_STRIDE = 1_000_003  # keeps a rebuilt environment's seeds clear of every other environment's


class RecoveringEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, make_env: Callable[[], gym.Env]):
        super().__init__(env)
        self._make_env = make_env  # picklable (a partial of the factory), so the vector env is too
        self.restarts = 0
        self._seed: int | None = None
        self._last_obs = None
        self._reseed = False

    def _rebuild(self, err: Exception) -> None:
        self.restarts += 1
        if _is_power_of_ten(self.restarts):  # a flaky simulator must not flood the log
            log.warning("environment raised %s: %s; rebuilt it (rebuild %d of this environment; "
                        "logged at 1, 10, 100, ... rebuilds)", type(err).__name__, err, self.restarts)
        try:
            self.env.close()
        except Exception:
            pass  # it is broken already
        self.env = self._make_env()
        self._reseed = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._seed = seed
        elif self._reseed and self._seed is not None:
            seed = self._seed + RESEED_STRIDE * self.restarts  # deterministic, and not a replay
        for attempt in range(RESET_ATTEMPTS):
            try:
                obs, info = self.env.reset(seed=seed, options=options)
                break
            except Exception as err:
                if attempt == RESET_ATTEMPTS - 1:
                    raise
                self._rebuild(err)
        self._reseed = False
        self._last_obs = obs
        return obs, info

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as err:
            if self._last_obs is None:
                raise
            self._rebuild(err)
            return self._last_obs, 0.0, False, True, {"env_error": f"{type(err).__name__}: {err}"}
        self._last_obs = obs
        return obs, reward, terminated, truncated, info


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1
