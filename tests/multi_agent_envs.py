"""Small PettingZoo Parallel API environments whose every number is known, for the multi-agent tests.

`Relay`: a scout (Box(2) observations, Discrete(2) actions) and two runners (Box(3), Discrete(3)).
Each agent's reward is its action plus one hundredth of the step; runner_1 leaves after step 2
(terminated), the scout arrives after the first step, and the episode ends after `length` steps
(truncated). Observations hold the step number, so rows can be checked by hand.
"""

from __future__ import annotations

import functools

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.env import AECEnv

AGENTS = ("scout_0", "runner_0", "runner_1")


class Relay(ParallelEnv):
    metadata = {"name": "relay_v0"}
    render_mode = None

    def __init__(self, length: int = 5, runner_leaves_at: int = 2, scout_arrives_at: int = 1):
        self.possible_agents = list(AGENTS)
        self.length, self.runner_leaves_at, self.scout_arrives_at = length, runner_leaves_at, scout_arrives_at
        self.agents: list[str] = []
        self.step_count = 0
        self.rng = np.random.default_rng()

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(-100.0, 100.0, (2,) if agent.startswith("scout") else (3,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(2 if agent.startswith("scout") else 3)

    def _obs(self, agent):
        index = AGENTS.index(agent)
        values = [self.step_count, index, self.offset][: 2 if agent.startswith("scout") else 3]
        return np.asarray(values, np.float32)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.offset = float(self.rng.integers(0, 10))
        self.step_count = 0
        self.agents = [a for a in AGENTS if not (a.startswith("scout") and self.scout_arrives_at > 0)]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.step_count += 1
        rewards = {a: float(actions[a]) + self.step_count / 100 for a in self.agents}
        end = self.step_count >= self.length
        terminated = {a: a == "runner_1" and self.step_count == self.runner_leaves_at for a in self.agents}
        truncated = {a: end for a in self.agents}
        observations = {a: self._obs(a) for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if "scout_0" not in self.agents and self.step_count == self.scout_arrives_at and not end:
            self.agents.insert(0, "scout_0")
            observations["scout_0"] = self._obs("scout_0")
            # a live agent has every entry (PettingZoo's parallel_api_test); it did not act, so no reward
            rewards["scout_0"], terminated["scout_0"], truncated["scout_0"] = 0.0, False, False
        return observations, rewards, terminated, truncated, {a: {} for a in observations}

    def state(self):
        return np.asarray([self.step_count, self.offset], np.float32)

    @property
    def state_space(self):
        return spaces.Box(-100.0, 100.0, (2,), np.float32)


def relay(**kwargs) -> Relay:
    """What env.entry_point names: a function returning the environment."""
    return Relay(**kwargs)


class Together(ParallelEnv):
    """A cooperative task for learning tests: two agents see a target (one of 3) and are rewarded
    together, +1 each step both choose it, for 10 steps."""

    metadata = {"name": "together_v0"}

    def __init__(self):
        self.possible_agents = ["mate_0", "mate_1"]
        self.agents = []
        self.rng = np.random.default_rng()

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (3,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(3)

    def _observations(self):
        row = np.eye(3, dtype=np.float32)[self.target]
        return {a: row for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.steps = list(self.possible_agents), 0
        self.target = int(self.rng.integers(3))
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions):
        self.steps += 1
        both = all(actions[a] == self.target for a in self.agents)
        rewards = {a: 1.0 if both else 0.0 for a in self.agents}
        self.target = int(self.rng.integers(3))
        end = self.steps >= 10
        observations = self._observations()
        done = {a: end for a in self.agents}
        infos = {a: {} for a in self.agents}
        if end:
            self.agents = []
        return observations, rewards, {a: False for a in done}, done, infos


def relay_aec(**kwargs) -> AECEnv:
    """The Relay behind the AEC API (rlpar converts it back)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(Relay(**kwargs))


def rendezvous(**kwargs) -> Relay:
    """A Relay from a class defined inside this function, as users often write a factory: its
    instances cannot be pickled, so checkpoints cannot hold them."""

    class Rendezvous(Relay):
        pass

    return Rendezvous(**kwargs)


class MaskedPickers(ParallelEnv):
    """Agents with invalid-action masks, for the masking tests: two pickers (Discrete(5)) and a
    scout (Discrete(3)), each observing a Dict of `obs` (one-hot: the action that earns 1) and
    `action_mask` (1: legal; a random half of its actions, at least one, the pointed one among
    them). A masked action costs -10 and is counted in `masked_taken` (class-level) and, with
    `record`, a line in that file (environments in other processes). Episodes last `length` steps;
    the pickers' action sizes differ from the scout's, so a column holds the widest Discrete."""

    metadata = {"name": "masked_pickers_v0"}
    masked_taken = 0
    steps_taken = 0

    def __init__(self, length: int = 10, record: str | None = None):
        self.possible_agents = ["picker_0", "picker_1", "scout_0"]
        self.length, self.record = length, record
        self.agents: list[str] = []
        self.rng = np.random.default_rng()

    @staticmethod
    def choices(agent: str) -> int:
        return 3 if agent.startswith("scout") else 5

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        n = self.choices(agent)
        return spaces.Dict(
            {"obs": spaces.Box(0.0, 1.0, (n,), np.float32), "action_mask": spaces.Box(0, 1, (n,), np.int8)}
        )

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(self.choices(agent))

    def _observations(self) -> dict:
        observations = {}
        self.masks, self.good = {}, {}
        for agent in self.agents:
            n = self.choices(agent)
            mask = (self.rng.random(n) < 0.5).astype(np.int8)
            good = int(self.rng.integers(n))
            mask[good] = 1
            self.masks[agent], self.good[agent] = mask, good
            observations[agent] = {"obs": np.eye(n, dtype=np.float32)[good], "action_mask": mask.copy()}
        return observations

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.steps = list(self.possible_agents), 0
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions):
        self.steps += 1
        rewards = {}
        for agent in self.agents:
            action = int(actions[agent])
            type(self).steps_taken += 1
            if not self.masks[agent][action]:
                type(self).masked_taken += 1
                if self.record:
                    with open(self.record, "a") as file:
                        file.write(f"{agent}\n")
                rewards[agent] = -10.0
            else:
                rewards[agent] = float(action == self.good[agent])
        end = self.steps >= self.length
        observations = self._observations()
        infos = {a: {} for a in self.agents}
        ended = {a: end for a in self.agents}
        if end:
            self.agents = []
        return observations, rewards, {a: False for a in ended}, ended, infos


def masked_pickers(**kwargs) -> MaskedPickers:
    return MaskedPickers(**kwargs)


class MaskedPickersWideMask(MaskedPickers):
    """The scout's mask is one column wider than its actions: refused by validation."""

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(self.choices(agent) - (1 if agent.startswith("scout") else 0))


class InfoMaskedPickers(MaskedPickers):
    """MaskedPickers giving each agent's mask in its info (`infos[agent]["action_mask"]`, as some
    PettingZoo environments do) and observing only its pointer (env.action_mask_info_key)."""

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return super().observation_space(agent)["obs"]

    def _split(self, observations: dict) -> tuple[dict, dict]:
        return ({a: obs["obs"] for a, obs in observations.items()},
                {a: {"action_mask": obs["action_mask"]} for a, obs in observations.items()})

    def reset(self, seed=None, options=None):
        return self._split(super().reset(seed=seed, options=options)[0])

    def step(self, actions):
        observations, rewards, terminated, truncated, _ = super().step(actions)
        observations, infos = self._split(observations)
        return observations, rewards, terminated, truncated, infos


def info_masked_pickers(**kwargs) -> InfoMaskedPickers:
    return InfoMaskedPickers(**kwargs)
