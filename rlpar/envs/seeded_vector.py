"""Native numpy vector envs whose environments each own a random generator.

Gymnasium's numpy CartPole vector env draws every reset from one shared generator, so the
initial states of environment i depend on how many environments share it. rlpar seeds
environment i of a run with `seed + i` wherever it lives; these envs step all environments in
numpy and draw each environment's resets from its own generator, so a worker owning
environments [k, k + n) sees exactly what one process owning all of them would.
"""

from __future__ import annotations

from functools import cached_property

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import DEFAULT_X, DEFAULT_Y, PendulumEnv
from gymnasium.vector.utils import batch_space


def per_env_generators(seed, num_envs: int) -> list[np.random.Generator]:
    """Environment i's generator, as `Env.reset(seed=s)` seeds it: `seed` is a list of one seed
    per environment, or one seed s for seeds s, s + 1, ..., or None (fresh entropy)."""
    seeds = (
        list(seed) if isinstance(seed, (list, tuple)) else [None if seed is None else seed + i for i in range(num_envs)]
    )
    return [np.random.default_rng(s) for s in seeds]


class SeededCartPoleVectorEnv(gym.vector.VectorEnv):
    """CartPole-v1's dynamics for all environments at once, in the arithmetic of Gymnasium's
    numpy CartPole vector env, with next-step autoreset. Each environment draws its initial
    states from its own generator, in blocks of `RESET_BLOCK` (the same numbers as one draw per
    reset), so a reset step costs a few array operations however many environments reset. It
    steps faster than Gymnasium's vector env, which also checks each action and draws an empty
    reset every step (docs/benchmarks.md, "Figures behind design choices in rlpar/")."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
    RESET_BLOCK = 32  # initial states drawn at once per environment
    x_threshold: float  # copied from Gymnasium's CartPoleEnv with its other constants (__init__)
    theta_threshold_radians: float

    def __init__(self, num_envs: int, max_episode_steps: int = 500):
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        single = CartPoleEnv()
        for name in (
            "gravity",
            "masspole",
            "total_mass",
            "length",
            "polemass_length",
            "force_mag",
            "tau",
            "theta_threshold_radians",
            "x_threshold",
        ):
            setattr(self, name, getattr(single, name))
        self.low, self.high = -0.05, 0.05  # Gymnasium's CartPole initial-state range
        self.forces = np.array([-single.force_mag, single.force_mag])  # by action
        self.single_observation_space, self.single_action_space = single.observation_space, single.action_space
        self.observation_space = batch_space(single.observation_space, num_envs)
        self.action_space = batch_space(single.action_space, num_envs)
        self.state = np.zeros((4, num_envs))
        self.derivatives = np.zeros((4, num_envs))
        self.steps = np.zeros(num_envs, np.int32)
        self.prev_done = np.zeros(num_envs, bool)
        self.env_rngs: list[np.random.Generator] = []
        self.initial_states = np.zeros((num_envs, self.RESET_BLOCK, 4))
        self.next_initial = np.zeros(num_envs, np.int64)  # per environment: the next unused row

    @cached_property
    def limits(self) -> np.ndarray:
        """|state| beyond which an episode terminates, per state row [4, 1] (x and theta bounded).
        Cached on first use, so environments pickled before it existed resume too."""
        return np.array([[self.x_threshold], [np.inf], [self.theta_threshold_radians], [np.inf]])

    def _draw_initial_states(self, i: int) -> None:
        self.initial_states[i] = self.env_rngs[i].uniform(self.low, self.high, size=(self.RESET_BLOCK, 4))
        self.next_initial[i] = 0

    def _reset_envs(self, envs: np.ndarray) -> None:
        rows = self.next_initial[envs]
        if rows.max() == self.RESET_BLOCK:
            for i in envs[rows == self.RESET_BLOCK]:
                self._draw_initial_states(i)
            rows = self.next_initial[envs]
        self.state[:, envs] = self.initial_states[envs, rows].T
        self.next_initial[envs] = rows + 1
        self.steps[envs] = 0

    def reset(self, *, seed=None, options=None):
        self.env_rngs = per_env_generators(seed, self.num_envs)
        for i in range(self.num_envs):
            self._draw_initial_states(i)
        self._reset_envs(np.arange(self.num_envs))
        self.prev_done[:] = False
        return self.state.T.astype(np.float32), {}

    def step(self, actions):
        state = self.state  # [4, N]: x, x_dot, theta, theta_dot
        theta, theta_dot = state[2], state[3]
        force = self.forces[actions]
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        # Euler, as Gymnasium's: the derivatives [4, N] times tau, added in place (the same numbers
        # as x + tau * x_dot row by row, with a few whole-array calls per step less)
        derivatives = self.derivatives
        derivatives[0::2] = state[1::2]  # x_dot, theta_dot
        thetaacc = np.divide(
            self.gravity * sintheta - costheta * temp,
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass),
            out=derivatives[3],
        )
        np.subtract(temp, self.polemass_length * thetaacc * costheta / self.total_mass, out=derivatives[1])  # xacc
        derivatives *= self.tau
        state += derivatives
        beyond = np.abs(state) > self.limits  # |x| and |theta| past their thresholds
        terminated = beyond[0] | beyond[2]
        self.steps += 1
        truncated = self.steps >= self.max_episode_steps
        rewards = np.ones(self.num_envs, np.float32)
        resetting = self.prev_done
        if np.count_nonzero(resetting):  # next-step autoreset: this step only resets
            self._reset_envs(np.flatnonzero(resetting))
            rewards[resetting] = terminated[resetting] = truncated[resetting] = False
        self.prev_done = terminated | truncated
        return state.T.astype(np.float32), rewards, terminated, truncated, {}


class SeededPendulumVectorEnv(gym.vector.VectorEnv):
    """Pendulum-v1's dynamics for all environments at once: Gymnasium's PendulumEnv, seeded
    alike, with next-step autoreset (observations equal to float32 rounding, as numpy's
    vectorised sine may differ from the scalar one in the last bit). Gymnasium has no numpy
    vector Pendulum, and stepping environments one by one costs several times more
    (docs/benchmarks.md, "Figures behind design choices in rlpar/")."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, max_episode_steps: int = 200, g: float = 10.0):
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        single = PendulumEnv(g=g)
        self.g, self.m, self.l, self.dt = single.g, single.m, single.l, single.dt
        self.max_speed, self.max_torque = single.max_speed, single.max_torque
        self.single_observation_space, self.single_action_space = single.observation_space, single.action_space
        self.observation_space = batch_space(single.observation_space, num_envs)
        self.action_space = batch_space(single.action_space, num_envs)
        self.theta = np.zeros(num_envs)
        self.theta_dot = np.zeros(num_envs)
        self.steps = np.zeros(num_envs, np.int64)
        self.prev_done = np.zeros(num_envs, bool)
        self.env_rngs: list[np.random.Generator] = []

    def _reset_env(self, i: int) -> None:
        self.theta[i], self.theta_dot[i] = self.env_rngs[i].uniform(
            low=-np.array([DEFAULT_X, DEFAULT_Y]), high=np.array([DEFAULT_X, DEFAULT_Y])
        )
        self.steps[i] = 0

    def _obs(self) -> np.ndarray:
        obs = np.empty((self.num_envs, 3), np.float32)
        np.cos(self.theta, out=obs[:, 0], casting="same_kind")
        np.sin(self.theta, out=obs[:, 1], casting="same_kind")
        obs[:, 2] = self.theta_dot
        return obs

    def reset(self, *, seed=None, options=None):
        self.env_rngs = per_env_generators(seed, self.num_envs)
        for i in range(self.num_envs):
            self._reset_env(i)
        self.prev_done[:] = False
        return self._obs(), {}

    def step(self, actions):
        # the action keeps its dtype (float32), as in PendulumEnv, whose arithmetic it then shapes;
        # np.minimum/np.maximum rather than np.clip (the same numbers, half the call overhead)
        u = np.minimum(
            np.maximum(np.asarray(actions).reshape(self.num_envs, -1)[:, 0], -self.max_torque), self.max_torque
        )
        th, thdot = self.theta, self.theta_dot
        costs = (((th + np.pi) % (2 * np.pi)) - np.pi) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        new_thdot = thdot + (3 * self.g / (2 * self.l) * np.sin(th) + 3.0 / (self.m * self.l**2) * u) * self.dt
        new_thdot = np.minimum(np.maximum(new_thdot, -self.max_speed), self.max_speed)
        self.theta, self.theta_dot = th + new_thdot * self.dt, new_thdot
        self.steps += 1
        rewards = -costs
        resetting = self.prev_done
        truncated = self.steps >= self.max_episode_steps
        if resetting.any():  # next-step autoreset: this step only resets
            for i in np.flatnonzero(resetting):
                self._reset_env(i)
            rewards[resetting] = 0.0
            truncated &= ~resetting
        self.prev_done = truncated
        return self._obs(), rewards, np.zeros(self.num_envs, bool), truncated.copy(), {}


# Registered id -> (class, default episode limit) for ids rlpar can vectorise natively per-env-seeded.
SEEDED_NATIVE = {
    "CartPole-v1": (SeededCartPoleVectorEnv, 500),
    "CartPole-v0": (SeededCartPoleVectorEnv, 200),
    "Pendulum-v1": (SeededPendulumVectorEnv, 200),
}
