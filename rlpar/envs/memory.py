"""Partially observed environments: tasks a feed-forward policy cannot solve and a recurrent one can.

`MemoryCue` is rlpar's own memory task, the smallest that needs a memory: a cue shown once must be
recalled several steps later. `PartialObservation` hides part of a registered task's observation
(its velocities, for the classic-control tasks below), so the policy must infer them from the
observations it has seen. Registered as `rlpar/MemoryCue-v0` and `rlpar/<Task>NoVelocity-v<n>`
when rlpar.envs is imported; the classes also work as `env.entry_point=rlpar.envs.memory:<Class>`.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np


class MemoryCue(gym.Env):
    """Recall a cue: one of `num_cues`, one-hot in the first observation only. `delay` blank
    observations follow, then a query; the action taken on the query is the answer (+1 when it
    names the cue, `wrong_reward` otherwise) and ends the episode. Every other action is ignored
    and rewarded 0, so an episode is `delay + 2` steps. A feed-forward policy answers at chance
    (expected return 0 with two cues); one that remembers the cue scores 1.

    Observation (float32): [cue one-hot (num_cues), query flag, fraction of the episode left].
    """

    metadata = {"render_modes": []}

    def __init__(self, num_cues: int = 2, delay: int = 8, wrong_reward: float = -1.0):
        if num_cues < 2 or delay < 0:
            raise ValueError(f"MemoryCue needs num_cues >= 2 and delay >= 0 (got {num_cues}, {delay})")
        self.num_cues, self.delay, self.wrong_reward = int(num_cues), int(delay), float(wrong_reward)
        self.length = self.delay + 2  # the cue, the blanks, the query
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.num_cues + 2,), np.float32)
        self.action_space = gym.spaces.Discrete(self.num_cues)
        self.cue, self.steps = 0, 0

    def _observe(self) -> np.ndarray:
        obs = np.zeros(self.num_cues + 2, np.float32)
        if self.steps == 0:
            obs[self.cue] = 1.0
        obs[self.num_cues] = float(self.steps == self.length - 1)
        obs[self.num_cues + 1] = (self.length - self.steps) / self.length
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.steps = int(self.np_random.integers(self.num_cues)), 0
        return self._observe(), {}

    def step(self, action):
        answered = self.steps == self.length - 1
        reward = (1.0 if int(action) == self.cue else self.wrong_reward) if answered else 0.0
        self.steps += 1
        return self._observe(), reward, answered, False, {}


class PartialObservation(gym.Env):
    """A registered task (`task_id`) seen through the observation indices `keep` only.

    The task keeps its actions, rewards, seeding and registered time limit (`max_episode_steps`
    overrides it; -1 removes it, as in gym.make). A subclass names a task and the indices by
    default, so `env.entry_point=rlpar.envs.memory:CartPoleNoVelocity` needs no kwargs.
    """

    task_id: str | None = None
    visible: tuple[int, ...] = ()
    metadata = {"render_modes": ["human", "rgb_array"]}

    def __init__(
        self,
        task_id: str | None = None,
        keep: Sequence[int] | None = None,
        max_episode_steps: int | None = None,
        **task_kwargs,
    ):
        task_id = task_id or self.task_id
        if not task_id:
            raise ValueError("PartialObservation needs task_id, a registered Gymnasium id")
        self.task = gym.make(task_id, max_episode_steps=max_episode_steps, disable_env_checker=True, **task_kwargs)
        full = self.task.observation_space
        if not isinstance(full, gym.spaces.Box) or len(full.shape) != 1:
            raise ValueError(f"PartialObservation needs a flat Box observation; {task_id} has {full}")
        self.keep = np.array([int(i) for i in (self.visible if keep is None else keep)], np.int64)
        if self.keep.size == 0 or self.keep.min() < 0 or self.keep.max() >= full.shape[0]:
            raise ValueError(
                f"keep={self.keep.tolist()} must name some of {task_id}'s {full.shape[0]} observation indices"
            )
        self.observation_space = gym.spaces.Box(full.low[self.keep], full.high[self.keep], dtype=full.dtype)
        self.action_space = self.task.action_space
        self.metadata = self.task.metadata
        self.render_mode = self.task.render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs, info = self.task.reset(seed=seed, options=options)
        return obs[self.keep], info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.task.step(action)
        return obs[self.keep], reward, terminated, truncated, info

    def render(self):
        return self.task.render()

    def close(self):
        self.task.close()


class CartPoleNoVelocity(PartialObservation):
    """CartPole-v1 seeing the cart's position and the pole's angle; both velocities hidden."""

    task_id, visible = "CartPole-v1", (0, 2)


class PendulumNoVelocity(PartialObservation):
    """Pendulum-v1 seeing cos and sin of the angle; the angular velocity hidden."""

    task_id, visible = "Pendulum-v1", (0, 1)


class AcrobotNoVelocity(PartialObservation):
    """Acrobot-v1 seeing cos and sin of both joint angles; both angular velocities hidden."""

    task_id, visible = "Acrobot-v1", (0, 1, 2, 3)


class MountainCarNoVelocity(PartialObservation):
    """MountainCar-v0 seeing the car's position; its velocity hidden."""

    task_id, visible = "MountainCar-v0", (0,)


class MountainCarContinuousNoVelocity(PartialObservation):
    """MountainCarContinuous-v0 seeing the car's position; its velocity hidden."""

    task_id, visible = "MountainCarContinuous-v0", (0,)


# Pendulum-v1 registers no reward_threshold: -200 is RL Baselines3 Zoo's usual bar for it.
NO_VELOCITY_THRESHOLDS = {"Pendulum-v1": -200.0}
NO_VELOCITY_TASKS = (
    CartPoleNoVelocity,
    PendulumNoVelocity,
    AcrobotNoVelocity,
    MountainCarNoVelocity,
    MountainCarContinuousNoVelocity,
)
MEMORY_CUE_THRESHOLD = 0.9  # out of 1: a feed-forward policy's expectation is 0


def register_memory_envs() -> None:
    """rlpar/MemoryCue-v0, and rlpar/<Task>NoVelocity-v<n> with the full task's version, time limit
    and reward threshold (the velocity-free task is judged by the full task's bar)."""
    if "rlpar/MemoryCue-v0" not in gym.registry:
        gym.register(
            "rlpar/MemoryCue-v0", entry_point="rlpar.envs.memory:MemoryCue", reward_threshold=MEMORY_CUE_THRESHOLD
        )
    for task in NO_VELOCITY_TASKS:
        full = gym.spec(task.task_id)
        env_id = f"rlpar/{task.__name__}-v{full.version}"
        if env_id not in gym.registry:
            # The task's own limit is lifted (-1) and put back by gym.make as the registered one, so
            # gym.make(env_id, max_episode_steps=n) changes it as for any registered id.
            gym.register(
                env_id,
                entry_point=f"rlpar.envs.memory:{task.__name__}",
                kwargs={"max_episode_steps": -1},
                max_episode_steps=full.max_episode_steps,
                reward_threshold=NO_VELOCITY_THRESHOLDS.get(task.task_id, full.reward_threshold),
            )
