"""Survive an exception inside one environment without losing the worker that steps it, but
never train on an environment that only fails.

A simulator that crashes now and then (a physics blow-up, a lost connection to an external
program) should cost one episode, not the run. The failed environment is closed and built again;
the failing step is reported as a truncation at the last good observation, so the learner
bootstraps from it as it would at a time limit, and the vector env's autoreset starts a new
episode in the rebuilt environment. Each rebuild is counted (`restarts`, logged as
`env_restarts`).

An environment that fails again and again would turn every step into an empty episode: more
than `max_restarts` rebuilds within `restart_window_s`, or `FAILURES_IN_A_ROW` failures without
one good step between them (a slow simulator never fills the window), stop the run with
EnvironmentFailedError naming the environment and its last exception. So does an observation or
reward that breaks the environment's own contract: no rebuild mends that.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import gymnasium as gym

from rlpar.envs.contract import observation_problem, reward_problem
from rlpar.errors import EnvironmentFailedError, first_line

log = logging.getLogger("rlpar")

RESET_ATTEMPTS = 3  # rebuilds tried in a row before a reset error is passed on
FAILURES_IN_A_ROW = 10  # step failures with no good step between them: the environment is broken
RESEED_STRIDE = 1_000_003  # keeps a rebuilt environment's seeds clear of every other environment's
_REBUILDS_IN_PROCESS: dict[str, int] = {}  # by environment name: 64 environments failing at once log one line, not 64


class RecoveringEnv(gym.Wrapper):
    def __init__(
        self,
        env: gym.Env,
        make_env: Callable[[], gym.Env],
        *,
        name: str = "the environment",
        max_restarts: int = 100,
        restart_window_s: float = 60.0,
    ):
        super().__init__(env)
        self._make_env = make_env  # picklable (a partial of the factory), so the vector env is too
        self.name = name
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.restarts = 0
        self.steps = 0
        self._recent: deque[float] = deque()  # times of the rebuilds within the window
        self._failures_in_a_row = 0
        self._seed: int | None = None
        self._last_obs = None
        self._reseed = False

    def __setstate__(self, state: dict) -> None:
        """Unpickled (a resume): the clock of the process that pickled it means nothing here."""
        self.__dict__.update(state)
        self._recent = deque()

    def _rebuild(self, err: Exception) -> None:
        self.restarts += 1
        stop_if_failing_for_good(
            err,
            self._recent,
            self._failures_in_a_row,
            name=self.name,
            max_restarts=self.max_restarts,
            restart_window_s=self.restart_window_s,
        )
        log_rebuild(err, self.name, self.restarts)
        close_quietly(self.env)
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
                    raise reset_failed(err, self.name) from err
                self._rebuild(err)
        self._check(obs, 0.0, "reset")
        self._reseed = False
        self._last_obs = obs
        return obs, info

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as err:
            if self._last_obs is None:
                raise
            self._failures_in_a_row += 1
            self._rebuild(err)
            return self._last_obs, 0.0, False, True, {"env_error": f"{type(err).__name__}: {err}"}
        self.steps += 1
        self._check(obs, reward, f"step {self.steps}")
        self._failures_in_a_row = 0
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _check(self, obs, reward, when: str) -> None:
        problem = reward_problem(reward) or observation_problem(obs, self.observation_space)
        if problem:
            raise EnvironmentFailedError(f"environment {self.name} returned {problem} (at {when})")


def stop_if_failing_for_good(
    err: Exception, recent: deque, failures_in_a_row: int, *, name: str, max_restarts: int, restart_window_s: float
) -> None:
    """Count a rebuild now in `recent` (the times of one environment's rebuilds); raise
    EnvironmentFailedError past `max_restarts` within the window, or after FAILURES_IN_A_ROW."""
    now = time.monotonic()
    recent.append(now)
    while recent and recent[0] < now - restart_window_s:
        recent.popleft()
    last = f"last: {type(err).__name__}: {first_line(err)}"
    if len(recent) > max_restarts:
        raise EnvironmentFailedError(
            f"environment {name} raised {len(recent)} times within {restart_window_s:g} s, more "
            f"than env.max_restarts={max_restarts} per env.restart_window_s; {last}"
        ) from err
    if failures_in_a_row >= FAILURES_IN_A_ROW:
        raise EnvironmentFailedError(
            f"environment {name} raised on {failures_in_a_row} steps in a row, rebuilt each time, "
            f"without one good step; {last}"
        ) from err


def log_rebuild(err: Exception, name: str, restarts: int) -> None:
    """One warning line at the 1st, 10th, 100th, ... rebuild of such environments in this process:
    a flaky simulator must not flood the log."""
    in_process = _REBUILDS_IN_PROCESS[name] = _REBUILDS_IN_PROCESS.get(name, 0) + 1
    if _is_power_of_ten(in_process):
        log.warning(
            "environment %s raised %s: %s; rebuilt it (rebuild %d of this environment, %d of such "
            "environments in this process; logged at 1, 10, 100, ...)",
            name,
            type(err).__name__,
            err,
            restarts,
            in_process,
        )


def reset_failed(err: Exception, name: str) -> EnvironmentFailedError:
    """An environment whose reset raised RESET_ATTEMPTS times in a row, rebuilt between: it
    stops the run as one that fails for good (with a checkpoint)."""
    return EnvironmentFailedError(
        f"environment {name} raised on {RESET_ATTEMPTS} resets in a row, rebuilt each "
        f"time; last: {type(err).__name__}: {first_line(err)}"
    )


def close_quietly(env) -> None:
    try:
        env.close()
    except Exception:
        pass  # it is broken already


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1
