"""PettingZoo environments as rows of agents (`env=pettingzoo`).

A multi-agent environment with A possible agents becomes A columns of a Gymnasium vector env,
one per agent, so every sampler, batch, checkpoint and the identical-batch guarantee work as for
single-agent environments: environment k of a worker is columns [k*A, (k+1)*A), in the order of
`possible_agents`. A worker's columns start at a multiple of A, so a column's agent is its
index modulo A wherever the column is (rlpar.models.multi_agent routes rows to policies so).

Each row is what the agent's policy reads: its own observation, flattened, then (with
`agent_id`) the one-hot index of the agent among the agents of its policy, then (for a
centralised critic, `global_state`) the environment's global state; padded with zeros to the
widest row of the environment. Agents that are not in the episode (not yet arrived, or gone)
have zero rows and their columns' steps are marked inactive (`info["agent_active"]`), which the
rollout worker treats like autoreset steps: not transitions. An environment's episode ends when
no agent is left; the next step only resets it (Gymnasium's next-step autoreset), and the team's
return (the sum over agents) is reported in `info` at the end.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
from collections import deque
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from rlpar.envs.contract import observation_problem, reward_problem
from rlpar.envs.recovering import (
    RESEED_STRIDE,
    RESET_ATTEMPTS,
    close_quietly,
    log_rebuild,
    reset_failed,
    stop_if_failing_for_good,
)
from rlpar.envs.spaces import (
    ACTION_MASK_KEY,
    SUPPORTED_ACTIONS,
    ActionInfo,
    ActionMapper,
    describe_action_space,
    dict_key_columns,
    draw_noise,
    flatten_observation_fn,
    is_image_space,
    observation_dim,
)
from rlpar.envs.wrapping import with_mask, with_mask_space
from rlpar.errors import EnvironmentFailedError
from rlpar.selfplay.scripted import SCRIPTED_PLAYERS, scripted_player

POLICY_MAPPINGS = ("auto", "shared", "group", "agent")  # or {policy: [agent names or patterns]}
GLOBAL_STATES = ("auto", "state", "observations")
STATE_KEY_PREFIX = "state/"  # a global state's copies of the agents' Dict keys (AgentLayout.row_keys)
SHARED_POLICY = "shared"


def module_env_factory(module_name: str):
    """Module `module_name`'s `parallel_env` (or its AEC `env`): what builds its environment."""
    module = importlib.import_module(module_name)
    make = getattr(module, "parallel_env", None) or getattr(module, "env", None)
    if make is None:
        raise ImportError(
            f"module '{module_name}' has neither parallel_env() nor env() (a PettingZoo environment module)"
        )
    return make


def as_parallel_env(env):
    """A PettingZoo Parallel API environment: `env` itself, or converted from the AEC API."""
    from pettingzoo.utils.conversions import aec_to_parallel
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(env, AECEnv):
        return aec_to_parallel(env)
    if not isinstance(env, ParallelEnv) and not all(
        hasattr(env, name) for name in ("possible_agents", "reset", "step")
    ):
        raise TypeError(f"{type(env).__name__} is not a PettingZoo ParallelEnv or AECEnv")
    return env


class AgentMasksFromInfo:
    """A PettingZoo Parallel API environment whose agents' action masks arrive in their infos
    (`infos[agent][info_key]`), seen as one whose agents' Dict observations hold them under
    `action_mask`, as rlpar.envs.wrapping.ActionMaskFromInfo does for a Gymnasium environment (the
    same layout, and the same rules for a missing or wrong-sized mask). The state, spaces of
    actions, agents and rendering are the environment's."""

    def __init__(self, env, info_key: str):
        self.env, self.info_key = env, info_key
        self.possible_agents = list(env.possible_agents)
        self.metadata = getattr(env, "metadata", {})
        self._widths = {a: describe_action_space(env.action_space(a)).size for a in self.possible_agents}
        self._spaces = {a: with_mask_space(env.observation_space(a), self._widths[a], info_key) for a in self._widths}

    @property
    def agents(self):
        return self.env.agents

    @property
    def render_mode(self):
        return getattr(self.env, "render_mode", None)

    def observation_space(self, agent):
        return self._spaces[agent]

    def action_space(self, agent):
        return self.env.action_space(agent)

    def _with_masks(self, observations: dict, infos: dict, where: str, ended=None) -> dict:
        masked = {}
        for agent, obs in observations.items():
            whose = f"{where} (agent {agent})"
            final = ended is not None and ended(agent)
            masked[agent] = with_mask(obs, infos.get(agent, {}), self.info_key, self._widths[agent], whose, final)
        return masked

    def reset(self, seed=None, options=None):
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._with_masks(observations, infos, "the reset"), infos

    def step(self, actions):
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        ended = lambda agent: bool(terminated.get(agent, False) or truncated.get(agent, False))  # noqa: E731
        return self._with_masks(observations, infos, "a step", ended), rewards, terminated, truncated, infos

    def state(self):
        return self.env.state()

    @property
    def state_space(self):
        return getattr(self.env, "state_space", None)

    def render(self):
        return self.env.render()

    def close(self):
        self.env.close()


def policy_groups(agents: tuple[str, ...], mapping, same_spaces) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Policy names and, per agent, its policy's index. `mapping`: `shared` (one policy),
    `agent` (one each), `group` (one per name prefix: speaker_0 -> speaker), `auto` (shared
    when all agents have the same spaces, else group), or {policy: [agent names or glob patterns]}.
    `same_spaces(a, b)`: whether agents a and b could share a policy."""
    if mapping == "auto":
        mapping = SHARED_POLICY if all(same_spaces(agents[0], a) for a in agents) else "group"
    if mapping == SHARED_POLICY:
        names = [SHARED_POLICY] * len(agents)
    elif mapping == "agent":
        names = list(agents)
    elif mapping == "group":
        names = [re.sub(r"_\d+$", "", agent) for agent in agents]
    elif isinstance(mapping, dict):
        names = []
        for agent in agents:
            owners = [
                p
                for p, patterns in mapping.items()
                if any(fnmatch.fnmatchcase(agent, str(pattern)) for pattern in _as_list(patterns))
            ]
            if len(owners) != 1:
                raise ValueError(
                    f"env.policies: agent '{agent}' matches {len(owners)} policies "
                    f"({', '.join(owners) or 'none'}); each agent needs exactly one"
                )
            names.append(owners[0])
        unmatched = [
            f"{p} ({', '.join(map(str, _as_list(patterns)))})" for p, patterns in mapping.items() if p not in names
        ]
        if unmatched:
            raise ValueError(
                f"env.policies: {' and '.join(unmatched)} {'matches' if len(unmatched) == 1 else 'match'} "
                f"no agent; the agents are {', '.join(agents)}"
            )
    else:
        raise ValueError(
            f"env.policies: expected one of {', '.join(POLICY_MAPPINGS)} or a mapping "
            f"{{policy: [agent names or patterns]}}, got {mapping!r}"
        )
    policies = tuple(dict.fromkeys(names))
    policy_of = tuple(policies.index(name) for name in names)
    for p, policy in enumerate(policies):
        members = [a for a, q in zip(agents, policy_of) if q == p]
        odd = next((a for a in members if not same_spaces(members[0], a)), None)
        if odd is not None:
            raise ValueError(
                f"env.policies: policy '{policy}' covers agents with different spaces ({members[0]} and "
                f"{odd}); give them separate policies (env.policies=group or agent)"
            )
    return policies, policy_of


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass(frozen=True)
class AgentLayout:
    """Where each agent's data sits in its row, and which policy reads it."""

    agents: tuple[str, ...]  # possible_agents: column k*A + i is agent i of environment k
    policies: tuple[str, ...]
    policy_of: tuple[int, ...]  # per agent
    obs_dims: tuple[int, ...]  # per agent: its flattened observation
    id_dims: tuple[int, ...]  # per agent: the one-hot agent index (agents of its policy), or 0
    id_index: tuple[int, ...]  # per agent: its index among the agents of its policy
    state_dim: int  # the global state a centralised critic reads (0: none)
    actions: tuple[ActionInfo, ...]  # per agent
    state_from_env: bool = False  # the global state is the env's state(); else every agent's observation
    # per agent: its Dict observation's keys and their columns (rlpar.envs.spaces.dict_key_columns), where
    # a model finds the agent's action mask
    obs_keys: tuple[tuple[tuple[str, int, int], ...], ...] = ()

    @property
    def actor_inputs(self) -> tuple[int, ...]:
        """Per agent: the leading values of its row its actor reads (the critic reads the row)."""
        return tuple(o + i for o, i in zip(self.obs_dims, self.id_dims))

    @property
    def row_dims(self) -> tuple[int, ...]:
        return tuple(a + self.state_dim for a in self.actor_inputs)

    @property
    def row_dim(self) -> int:
        return max(self.row_dims)

    def row_keys(self, agent: int) -> tuple[tuple[str, int, int], ...]:
        """The Dict keys in agent `agent`'s row and their columns: its own observation's, then, in
        a global state made of every agent's observation, each agent's as `state/<agent>/<key>`
        (so a model that does not read an action mask skips the masks the state holds too)."""
        own = self.obs_keys[agent] if self.obs_keys else ()
        if not self.state_dim or self.state_from_env or not self.obs_keys:
            return own
        start = self.actor_inputs[agent]
        in_state = []
        for other, keys, width in zip(self.agents, self.obs_keys, self.obs_dims):
            in_state += [(f"{STATE_KEY_PREFIX}{other}/{key}", start + first, start + stop) for key, first, stop in keys]
            start += width
        return own + tuple(in_state)

    def policy_agent(self, policy: int) -> int:
        """The first agent of `policy` (its agents share spaces and rows)."""
        return self.policy_of.index(policy)

    @property
    def column_action(self) -> ActionInfo:
        """One action layout for every column: the agents' own, or the widest Discrete."""
        first = self.actions[0]
        if all(a == first for a in self.actions):
            return first
        if all(a.discrete and not a.factored for a in self.actions):
            return max(self.actions, key=lambda a: a.size)
        raise ValueError(
            "env: agents' action spaces differ beyond the number of Discrete choices "
            f"({', '.join(sorted(set(map(_describe, self.actions))))}); rlpar batches every agent's "
            "actions in one array"
        )


def _describe(action: ActionInfo) -> str:
    if action.factored:
        return f"MultiDiscrete{list(action.nvec)}"
    return f"Discrete({action.size})" if action.discrete else f"Box({action.size})"


def agent_layout(env, *, policies="auto", agent_id: bool = False, global_state: str | None = None) -> AgentLayout:
    """The layout of `env`'s agents (raises ValueError or TypeError naming what rlpar refuses)."""
    try:
        agents = tuple(env.possible_agents)
    except AttributeError:  # PettingZoo's base class raises it where an env generates its agents
        agents = ()
    if not agents:
        raise ValueError(
            f"env: {type(env).__name__} declares no possible_agents (agents it creates as it runs?); rlpar gives "
            "each possible agent its own column, so it needs them all up front: wrap the environment "
            "(env.entry_point) so that possible_agents lists every agent it can ever create"
        )
    obs_spaces = {a: env.observation_space(a) for a in agents}
    action_spaces = {a: env.action_space(a) for a in agents}
    for agent, space in obs_spaces.items():
        if is_image_space(space):
            raise TypeError(f"agent '{agent}' observes images; env=pettingzoo takes vector observations")
    try:
        actions = tuple(describe_action_space(action_spaces[a]) for a in agents)
    except TypeError:
        raise TypeError(f"an agent's action space is not one of {SUPPORTED_ACTIONS}") from None
    obs_dims = tuple(observation_dim(obs_spaces[a]) for a in agents)

    def same_spaces(a, b):
        return obs_spaces[a] == obs_spaces[b] and action_spaces[a] == action_spaces[b]

    names, policy_of = policy_groups(agents, policies, same_spaces)
    members = [[a for a, q in enumerate(policy_of) if q == p] for p in range(len(names))]
    id_index = tuple(members[policy_of[a]].index(a) for a in range(len(agents)))
    id_dims = tuple(len(members[policy_of[a]]) if agent_id else 0 for a in range(len(agents)))
    state_dim, state_from_env = 0, False
    if global_state is not None:
        state_dim, state_from_env = global_state_source(env, global_state, obs_dims)
    obs_keys = tuple(dict_key_columns(obs_spaces[a]) for a in agents)
    layout = AgentLayout(
        agents, names, policy_of, obs_dims, id_dims, id_index, state_dim, actions, state_from_env, obs_keys
    )
    layout.column_action  # noqa: B018 - raises for action spaces one array cannot hold
    return layout


def has_state(env) -> bool:
    return callable(getattr(env, "state", None)) and getattr(env, "state_space", None) is not None


def global_state_source(env, global_state: str, obs_dims) -> tuple[int, bool]:
    """The global state's size, and whether it is the env's state() (else all agents' observations)."""
    if global_state not in GLOBAL_STATES:
        raise ValueError(f"env.global_state: expected one of {', '.join(GLOBAL_STATES)}, got {global_state!r}")
    if global_state == "state" and not has_state(env):
        raise ValueError(
            "env.global_state=state: the environment has no state() and state_space; use auto or observations"
        )
    if global_state != "observations" and has_state(env):
        return observation_dim(env.state_space), True
    return sum(obs_dims), False


def team_episode_info(num_columns: int) -> dict:
    return {
        "agent_active": np.zeros(num_columns, bool),
        "team_return": np.full(num_columns, np.nan),
        "team_length": np.zeros(num_columns, np.int64),
    }


class MultiAgentVectorEnv(gym.vector.VectorEnv):
    """`num_columns // A` PettingZoo parallel environments as `num_columns` agent columns, with
    next-step autoreset per environment (see the module docstring)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        *,
        make,
        num_columns: int | None = None,
        policies="auto",
        agent_id: bool = False,
        global_state: str | None = None,
        name: str = "the environment",
        max_restarts: int = 100,
        restart_window_s: float = 60.0,
    ):
        """`num_columns`: whole environments' agents (None: one environment's). An environment
        that raises is rebuilt as a single-agent one is (rlpar.envs.recovering, the env.max_restarts
        and env.restart_window_s limits): its agents' step is a truncation at their last good rows."""
        first = make()
        self._make = make  # picklable (a partial of the factory), so the vector env is too
        self.name, self.max_restarts, self.restart_window_s = name, max_restarts, restart_window_s
        self.layout = agent_layout(first, policies=policies, agent_id=agent_id, global_state=global_state)
        self.agents_per_env = len(self.layout.agents)
        num_columns = self.agents_per_env if num_columns is None else num_columns
        if num_columns % self.agents_per_env:
            raise ValueError(f"{num_columns} columns are not whole environments of {self.agents_per_env} agents")
        count = num_columns // self.agents_per_env
        self.envs = [first] + [make() for _ in range(count - 1)]
        self.num_envs = num_columns
        self.obs_spaces = [first.observation_space(a) for a in self.layout.agents]
        self.action_spaces = [first.action_space(a) for a in self.layout.agents]
        row = gym.spaces.Box(-np.inf, np.inf, (self.layout.row_dim,), np.float32)
        self.single_observation_space, self.observation_space = row, gym.vector.utils.batch_space(row, num_columns)
        column_action = self.layout.column_action
        self.single_action_space = (
            gym.spaces.Discrete(column_action.size)
            if column_action.discrete and not column_action.factored
            else self.action_spaces[0]
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_columns)
        self.resetting = np.zeros(count, bool)  # the environment's episode ended: this step resets it
        self.team_return = np.zeros(count)
        self.team_length = np.zeros(count, np.int64)
        self.id_columns = [self.layout.obs_dims[a] + self.layout.id_index[a] for a in range(self.agents_per_env)]
        self.state_columns = [
            slice(self.layout.actor_inputs[a], self.layout.row_dims[a]) for a in range(self.agents_per_env)
        ]
        self.restarts = 0  # rebuilds of all its environments (rlpar.envs.factory.env_restarts)
        self._rebuilds = [0] * count  # per environment: its reset seed's stride after a rebuild
        self._recent: list[deque] = [deque() for _ in range(count)]  # times of each environment's rebuilds
        self._failures_in_a_row = [0] * count
        self._seeds: list[int | None] = [None] * count
        self._reseed = [False] * count
        self._last_rows = np.zeros((num_columns, self.layout.row_dim), np.float32)
        self._steps = [0] * count  # per environment, as RecoveringEnv counts its steps

    def __setstate__(self, state: dict) -> None:
        """Unpickled (a resume): the clock of the process that pickled it means nothing here."""
        self.__dict__.update(state)
        self._recent = [deque() for _ in self.envs]

    # -- rows ---------------------------------------------------------------------------------
    def _rows(self, k: int, observations: dict, out: np.ndarray) -> None:
        """Environment k's agents' rows into `out` ([A, row_dim]); absent agents stay zero."""
        layout, env = self.layout, self.envs[k]
        out[:] = 0.0
        flat: list[np.ndarray | None] = [None] * self.agents_per_env
        for a, agent in enumerate(layout.agents):
            if agent in observations:
                flat[a] = np.asarray(gym.spaces.flatten(self.obs_spaces[a], observations[agent]), np.float32)
                out[a, : layout.obs_dims[a]] = flat[a]
                if layout.id_dims[a]:
                    out[a, self.id_columns[a]] = 1.0
        if layout.state_dim:
            if layout.state_from_env:
                state = np.asarray(gym.spaces.flatten(env.state_space, env.state()), np.float32)
            else:
                state = np.concatenate(
                    [np.zeros(d, np.float32) if f is None else f for f, d in zip(flat, layout.obs_dims)]
                )
            for a in range(self.agents_per_env):
                out[a, self.state_columns[a]] = state

    def _columns(self, k: int) -> slice:
        return slice(k * self.agents_per_env, (k + 1) * self.agents_per_env)

    # -- the vector env -----------------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        seeds = (
            seed
            if isinstance(seed, (list, tuple))
            else [None if seed is None else seed + i for i in range(self.num_envs)]
        )
        rows = np.zeros((self.num_envs, self.layout.row_dim), np.float32)
        for k in range(len(self.envs)):
            self._reset_env(k, seeds[k * self.agents_per_env], rows)
        self.resetting[:] = False
        self.team_return[:] = 0.0
        self.team_length[:] = 0
        return rows, {}

    def _reset_env(self, k: int, seed: int | None, rows: np.ndarray) -> None:
        """Reset environment k into its columns of `rows`; one that raises is rebuilt and reset
        again (RESET_ATTEMPTS in all). Seeded as RecoveringEnv seeds: a rebuilt one deterministically."""
        if seed is not None:
            self._seeds[k] = seed
        elif self._reseed[k] and (first := self._seeds[k]) is not None:
            seed = first + RESEED_STRIDE * self._rebuilds[k]
        for attempt in range(RESET_ATTEMPTS):
            try:
                observations, _ = self.envs[k].reset(seed=seed)
                broken = self._contract_problem(observations, {})
                if broken is None:
                    self._rows(k, observations, rows[self._columns(k)])
                break
            except Exception as err:
                if attempt == RESET_ATTEMPTS - 1:
                    raise reset_failed(err, self.name) from err
                self._rebuild(k, err)
                if (first := self._seeds[k]) is not None:
                    seed = first + RESEED_STRIDE * self._rebuilds[k]
        if broken is not None:
            raise EnvironmentFailedError(f"environment {self.name} returned {broken} (at reset)")
        self._reseed[k] = False
        self._last_rows[self._columns(k)] = rows[self._columns(k)]

    def _contract_problem(self, observations: dict, rewards: dict) -> str | None:
        """What an agent's observation or reward breaks of the environment's contract
        (rlpar.envs.contract), naming the agent; None when all is well."""
        for a, agent in enumerate(self.layout.agents):
            problem = (agent in observations and observation_problem(observations[agent], self.obs_spaces[a])) or (
                agent in rewards and reward_problem(rewards[agent])
            )
            if problem:
                return f"{problem} for agent {agent}"
        return None

    def _rebuild(self, k: int, err: Exception) -> None:
        self._rebuilds[k] += 1
        self.restarts += 1
        stop_if_failing_for_good(
            err,
            self._recent[k],
            self._failures_in_a_row[k],
            name=self.name,
            max_restarts=self.max_restarts,
            restart_window_s=self.restart_window_s,
        )
        log_rebuild(err, self.name, self._rebuilds[k])
        close_quietly(self.envs[k])
        self.envs[k] = self._make()
        self._reseed[k] = True

    def step(self, actions):
        A, layout = self.agents_per_env, self.layout
        rows = np.zeros((self.num_envs, layout.row_dim), np.float32)
        rewards = np.zeros(self.num_envs, np.float32)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        info = team_episode_info(self.num_envs)
        actions = np.asarray(actions)
        for k, env in enumerate(self.envs):
            columns = self._columns(k)
            if self.resetting[k]:  # next-step autoreset: this step only resets; no agent acts
                self._reset_env(k, None, rows)
                self.resetting[k] = False
                self.team_return[k], self.team_length[k] = 0.0, 0
                continue
            live = set(env.agents)
            chosen = {
                agent: self._env_action(a, actions[k * A + a]) for a, agent in enumerate(layout.agents) if agent in live
            }
            self._steps[k] += 1
            try:
                observations, agent_rewards, agent_terminated, agent_truncated, _ = env.step(chosen)
                broken = self._contract_problem(observations, agent_rewards)
                if broken is None:
                    self._rows(k, observations, rows[columns])
            except Exception as err:
                self._failures_in_a_row[k] += 1
                self._rebuild(k, err)
                self._cut_short(k, live, rows, truncated, info)
                continue
            if broken is not None:  # no rebuild mends that
                raise EnvironmentFailedError(f"environment {self.name} returned {broken} (at step {self._steps[k]})")
            self._failures_in_a_row[k] = 0
            self._last_rows[columns] = rows[columns]
            for a, agent in enumerate(layout.agents):
                if agent in live:
                    c = k * A + a
                    info["agent_active"][c] = True
                    rewards[c] = agent_rewards.get(agent, 0.0)
                    terminated[c] = bool(agent_terminated.get(agent, False))
                    truncated[c] = bool(agent_truncated.get(agent, False)) and not terminated[c]
            self.team_return[k] += float(rewards[columns].astype(np.float64).sum())
            self.team_length[k] += 1
            if not env.agents:
                self.resetting[k] = True
                info["team_return"][k * A], info["team_length"][k * A] = self.team_return[k], self.team_length[k]
        return rows, rewards, terminated, truncated, info

    def _cut_short(self, k: int, live: set, rows, truncated, info) -> None:
        """Environment k raised and was rebuilt: its live agents' episode is truncated at their last
        good rows (the learner bootstraps from them, as at a time limit), with no reward; the team's
        episode ends there, and the next step resets the rebuilt environment."""
        A, columns = self.agents_per_env, self._columns(k)
        rows[columns] = self._last_rows[columns]
        for a, agent in enumerate(self.layout.agents):
            if agent in live:
                info["agent_active"][k * A + a] = truncated[k * A + a] = True
        self.team_length[k] += 1
        self.resetting[k] = True
        info["team_return"][k * A], info["team_length"][k * A] = self.team_return[k], self.team_length[k]

    def _env_action(self, agent: int, action):
        space = self.action_spaces[agent]
        if isinstance(space, gym.spaces.Discrete):
            return int(action)
        return np.asarray(action, space.dtype).reshape(space.shape)

    def render(self):
        return self.envs[0].render()

    def close(self, **kwargs):
        for env in self.envs:
            env.close()


class TeamEnv(gym.Env):
    """One multi-agent environment as a Gymnasium env for evaluation and videos: observations
    are every agent's row [A, row_dim], actions one per agent, the reward the team's, and the
    episode ends when no agent is left."""

    def __init__(self, venv: MultiAgentVectorEnv):
        self.venv = venv
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (venv.num_envs, venv.layout.row_dim), np.float32)
        self.action_space = venv.action_space
        self.render_mode = getattr(venv.envs[0], "render_mode", None)
        self.metadata = {**getattr(venv.envs[0], "metadata", {}), "autoreset_mode": None}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)  # Gymnasium's contract: np_random seeded (gymnasium.utils.env_checker checks it)
        rows, _ = self.venv.reset(seed=None if seed is None else [seed] * self.venv.num_envs)
        return rows, {}

    def step(self, actions):
        rows, rewards, _, _, info = self.venv.step(np.asarray(actions))
        ended = not np.isnan(info["team_return"][0])
        return rows, float(np.asarray(rewards, np.float64).sum()), ended, False, {}

    def render(self):
        return self.venv.envs[0].render()

    def close(self):
        self.venv.close()


# -- turn-based games ---------------------------------------------------------------------------
# env.opponent: the learner's own current policy, uniform legal moves, the game's scripted player,
# or a pool of them and earlier snapshots (rlpar.selfplay.pool)
OPPONENTS = ("self", "random", "scripted", "pool")  # scripted: the game's own (rlpar.selfplay.scripted)
STANDALONE_OPPONENTS = ("self", "random", "scripted")  # what a game plays against without a trainer's pool
OPPONENT_STREAM = 7  # the opponent's generator: its own stream beside the game's seed


def is_turn_based(env) -> bool:
    """A PettingZoo AEC environment whose agents act in turn (PettingZoo's classic games): it
    declares itself not parallelizable, so it is played as a single-agent game (TurnBasedGame)."""
    from pettingzoo.utils.env import AECEnv

    return isinstance(env, AECEnv) and not env.metadata.get("is_parallelizable", False)


class TurnBasedGame(gym.Env):
    """A turn-based PettingZoo game as a single-agent Gymnasium env: the learner plays one seat,
    the next seat each episode (so it moves first in every other game of two seats), and the
    other seats are played inside the env by the opponent until it is the learner's turn again.

    The observation and action are the learner's seat's own (a Dict with its `action_mask`, which
    every algorithm applies); the reward is everything its seat received since its previous move,
    the opponent's moves and the game's end included; the episode ends when the game does. At the
    end `info` holds `game_outcome` (1 win, 0 draw, -1 loss: the sign of the seat's game return),
    `moved_first` and `illegal_actions` (moves the learner sent that its mask forbade).

    `opponent`: `random` (uniform among legal moves), `scripted` (the game's scripted player,
    rlpar.selfplay.scripted, where it has one), `self`: the policy handed by
    `set_opponent_policy` (a rollout worker's acting policy, so always its newest weights, acting
    on its own flattened observation, its actions sampled with this env's seeded noise; random
    moves until one is handed), or `pool`: each game's opponent drawn at reset from the lineup
    handed by `set_opponent_lineup` (rlpar.selfplay.pool.OpponentLineup: `self`, a reference or a
    snapshot; `self` until one is handed). A snapshot the pool dropped during a game hands the
    rest of the game to `self`. `info` at the end names the opponent met (`opponent`). Seeded
    resets give the same games: the seat is the reset seed plus the episodes since, and the
    opponent's generator (its draws and random moves) is seeded from it."""

    def __init__(self, game, opponent: str = "self", name: str = "the game"):
        """`game`: the PettingZoo AEC env (rlpar.envs.factory.make_turn_based_game builds it)."""
        if opponent not in OPPONENTS:
            raise ValueError(f"env.opponent: expected one of {', '.join(OPPONENTS)}, got {opponent!r}")
        self.game = game
        if not is_turn_based(self.game):
            raise TypeError(f"{name} is not a turn-based PettingZoo AEC game")
        self.seats = tuple(self.game.possible_agents)
        first = self.seats[0]
        if any(
            self.game.observation_space(a) != self.game.observation_space(first)
            or self.game.action_space(a) != self.game.action_space(first)
            for a in self.seats
        ):
            raise ValueError(f"{name}: its seats' spaces differ; rlpar plays every seat with one policy")
        self.observation_space = self.game.observation_space(first)
        self.action_space = self.game.action_space(first)
        self.opponent = opponent
        self._scripted = scripted_player(name)
        if opponent == "scripted" and self._scripted is None:
            raise ValueError(
                f"env.opponent=scripted: {name} has no scripted player (the games that have one: "
                f"{', '.join(SCRIPTED_PLAYERS)})"
            )
        self.metadata = {**getattr(self.game, "metadata", {}), "autoreset_mode": None}
        self.render_mode = getattr(self.game, "render_mode", None)
        self._policy = None
        self._lineup = None
        self.facing = opponent  # this game's opponent: self, random, scripted, or a snapshot's label
        self._policy_action = describe_action_space(self.action_space)
        self._seat_base, self._episodes = 0, 0
        self.learner = first
        self._rng = np.random.default_rng(OPPONENT_STREAM)
        self._return, self._illegal = 0.0, 0
        self._flatten = flatten_observation_fn(self.observation_space)
        self._mapper = ActionMapper(self._policy_action)
        self._batch = gym.vector.utils.create_empty_array(self.observation_space, 1)

    def __getstate__(self) -> dict:
        """Pickled without the opponent's policy and lineup (a worker hands them again before it
        acts) and the flattening closure (rebuilt)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_policy", "_lineup", "_flatten")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._policy = self._lineup = None
        self._flatten = flatten_observation_fn(self.observation_space)

    def set_opponent_policy(self, policy) -> None:
        """The acting policy the `self` opponent plays with (its `act(rows, noise, state)`)."""
        self._policy = policy

    def set_opponent_lineup(self, lineup) -> None:
        """The pool's opponents (`pool`): what each game's opponent is drawn from at reset."""
        self._lineup = lineup

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._seat_base, self._episodes = int(seed), 0
            self._rng = np.random.default_rng([int(seed), OPPONENT_STREAM])
        self.learner = self.seats[(self._seat_base + self._episodes) % len(self.seats)]
        self._episodes += 1
        if self.opponent == "pool":
            self.facing = "self" if self._lineup is None else self._lineup.draw(self._rng)
            if self.facing == "self" and self._policy is None and self._lineup is not None:
                # a worker without the current policy (central inference acts only for the
                # learner's seat): the newest snapshot plays instead of random moves
                self.facing = self._lineup.newest() or "self"
        self.game.reset(seed=seed)
        self._return, self._illegal = 0.0, 0
        self._play_opponents()
        if self._game_over():  # the game ended before the learner's first move
            return self.reset(options=options)
        return self.game.observe(self.learner), {}

    def step(self, action):
        if not self._legal(self.game.observe(self.learner), action):
            self._illegal += 1
        reward = self._advance(action)
        reward += self._play_opponents()
        self._return += reward
        ended = self._game_over()
        info = {}
        if ended:
            info = {
                "game_outcome": int(np.sign(self._return)),
                "moved_first": self.learner == self.seats[0],
                "illegal_actions": self._illegal,
                "opponent": self.facing,
            }
        return self.game.observe(self.learner), reward, ended, False, info

    def _game_over(self) -> bool:
        return not self.game.agents or all(
            self.game.terminations.get(a, False) or self.game.truncations.get(a, False) for a in self.game.agents
        )

    def _advance(self, action) -> float:
        """One move of the seat to move; the learner's reward from it."""
        self.game.step(int(action) if isinstance(self.action_space, gym.spaces.Discrete) else action)
        return float(self.game.rewards.get(self.learner, 0.0))

    def _play_opponents(self) -> float:
        """The other seats move until it is the learner's turn or the game ends; the learner's
        rewards from their moves."""
        reward = 0.0
        while not self._game_over() and self.game.agent_selection != self.learner:
            reward += self._advance(self._opponent_action(self.game.observe(self.game.agent_selection)))
        return reward

    def _opponent_policy(self):
        """Who moves for the other seats: a policy, or None for uniform legal moves."""
        if self.facing in ("random", "scripted"):
            return None
        if self.facing == "self" or self._lineup is None:
            return self._policy
        snapshot = self._lineup.policy(self.facing)
        return self._policy if snapshot is None else snapshot

    def _opponent_action(self, obs):
        if self.facing == "scripted" and self._scripted is not None:
            return self._scripted(obs, self._rng)
        policy = self._opponent_policy()
        if policy is None:
            mask = obs.get(ACTION_MASK_KEY) if isinstance(obs, dict) else None
            if mask is not None and np.any(mask):
                return int(self._rng.choice(np.flatnonzero(mask)))
            return self.action_space.sample()
        rows = self._flatten(gym.vector.utils.concatenate(self.observation_space, [obs], self._batch))
        greedy = hasattr(policy, "epsilon")  # a Q-network's ε is per worker environment: its greedy move
        noise = None
        if not greedy:
            noise = draw_noise(self._rng, self._policy_action, 1).astype(
                getattr(policy, "dtype", np.float64) if self._policy_action.discrete else np.float32, copy=False
            )
        state = np.zeros((1, policy.state_size)) if getattr(policy, "state_size", 0) else None
        action, _, _ = policy.act(policy.normalize(rows), noise, state)
        return self._mapper.to_env(action)[0]

    @staticmethod
    def _legal(obs, action) -> bool:
        mask = obs.get(ACTION_MASK_KEY) if isinstance(obs, dict) else None
        if mask is None or np.ndim(action) != 0:
            return True
        return bool(np.asarray(mask).reshape(-1)[int(action)])

    def render(self):
        return self.game.render()

    def close(self):
        self.game.close()
