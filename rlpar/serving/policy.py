"""`rlpar.load_policy(RUN_DIR)`: a run's policy as a small object that acts on the environment's
own observations and answers the environment's own actions.

It acts with the run's acting copy (rlpar.models.acting), the one evaluation plays with: the
observations flattened into training's rows and whitened with the checkpoint's statistics, the
action chosen (greedy, or drawn with `stochastic`), masked where the observation holds an action
mask, and mapped to the action space's bounds. So `act` gives exactly the actions `rlpar evaluate`
takes. A recurrent policy's state is the caller's: `act` returns the next one, and a zero state
(`state=None`) starts an episode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from rlpar.envs.spaces import ActionMapper, flatten_observation_fn
from rlpar.runtime.evaluation import acting_copy, acting_noise
from rlpar.serving.space_json import space_json


class Policy:
    """One policy of a run: `act(obs, state=None) -> (action, state)` for one observation of
    `observation_space` or a batch of them (stacked: a leading batch dimension). The state is
    None for a feed-forward policy, else [state_size] for one observation, [N, state_size] for a
    batch. Not safe to call from several threads at once (the server holds a lock)."""

    def __init__(
        self,
        spec,
        weights: dict,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        source: dict,
        stochastic: bool = False,
        seed: int | None = None,
        policy_id: str | None = None,
        agents: tuple[str, ...] = (),
    ):
        self.spec = spec
        self.weights = weights
        self.observation_space = observation_space
        self.action_space = action_space
        self.source = source
        self.stochastic = stochastic
        self.policy_id = policy_id
        # env.agent_id: the policy's agents, whose one-hot index follows the agent's observation
        self.agents = agents
        self.acting = acting_copy(spec, weights, stochastic)
        self.mapper = ActionMapper(spec.action)
        self._flatten = flatten_observation_fn(observation_space)
        self._noise = np.random.default_rng(seed) if stochastic else None

    @property
    def state_size(self) -> int:
        """Values in one observation's recurrent state (0: feed-forward)."""
        return self.acting.state_size

    @property
    def input_width(self) -> int:
        """Values of an observation's flattened row (the agent's index excluded)."""
        actor_inputs = getattr(self.spec, "actor_inputs", None)
        return int(self.spec.obs_dim if actor_inputs is None else actor_inputs) - len(self.agents)

    def act(self, obs, state=None, *, agent: str | None = None) -> tuple[Any, np.ndarray | None]:
        """The action(s) for `obs` and the state after them; `agent`: which of the policy's agents
        acts, where the run gave the policy its agents' index (env.agent_id)."""
        single = is_single_observation(self.observation_space, obs)
        rows = self.rows([obs] if single else obs, batch=not single, agent=agent)
        n = len(rows)
        if self.state_size:
            expected = (n, self.state_size)
            state = np.zeros(expected) if state is None else np.array(state, np.float64).reshape(expected)
        else:
            state = None
        x = self.acting.normalize(rows)
        noise = None if self._noise is None else acting_noise(self._noise, self.spec.action, self.acting, n)
        actions, _, _ = self.acting.act(x, noise, state)  # advances `state`
        env_actions = self.mapper.to_env(actions)
        if single:
            return env_actions[0], None if state is None else state[0]
        return env_actions, state

    def rows(self, obs, *, batch: bool, agent: str | None = None) -> np.ndarray:
        """The rows the network reads for a batch (stacked) or a list of single observations,
        padded to the network's width (a centralised critic's global state, which the actor does
        not read)."""
        space = self.observation_space
        empty: Any = None if batch else create_empty_array(space, len(obs))
        stacked = obs if batch else concatenate(space, obs, empty)
        rows = self._flatten(stacked)
        if rows.shape[1] != self.input_width:
            raise ValueError(f"observations flatten to {rows.shape[1]} values; the policy reads {self.input_width}")
        if self.agents:
            if agent not in self.agents:
                raise ValueError(f"name the acting agent: agent= one of {list(self.agents)}, got {agent!r}")
            one_hot = np.zeros((len(rows), len(self.agents)), rows.dtype)
            one_hot[:, self.agents.index(agent)] = 1
            rows = np.concatenate([rows, one_hot], axis=1)
        if rows.shape[1] < self.spec.obs_dim:
            rows = np.concatenate([rows, np.zeros((len(rows), self.spec.obs_dim - rows.shape[1]), rows.dtype)], axis=1)
        return rows

    def describe(self) -> dict:
        """The policy in JSON terms: its spaces, state, actions and the run it came from."""
        from rlpar import __version__

        return {
            "rlpar_version": __version__,
            "source": self.source,
            **({"policy_id": self.policy_id} if self.policy_id is not None else {}),
            **({"agents": list(self.agents)} if self.agents else {}),
            "observation_space": space_json(self.observation_space),
            "action_space": space_json(self.action_space),
            "recurrent": self.spec.recurrent,
            "state_size": self.state_size,
            "actions": "stochastic" if self.stochastic else "deterministic",
        }


def is_single_observation(space: gym.Space, obs) -> bool:
    """Whether `obs` is one observation of `space` rather than a batch of them (a leading batch
    dimension), read from its first leaf's rank; ValueError for neither."""
    if isinstance(space, gym.spaces.Dict):
        key = next(iter(space.spaces))
        return is_single_observation(space[key], obs[key])
    if isinstance(space, gym.spaces.Tuple):
        return is_single_observation(space[0], obs[0])
    shape, expected = tuple(np.shape(obs)), tuple(space.shape or ())
    if shape == expected:
        return True
    if shape[1:] == expected:
        return False
    raise ValueError(
        f"expected one observation of shape {list(expected)} or a batch [N, {', '.join(map(str, expected))}], "
        f"got shape {list(shape)}"
    )


def load_policy(
    run_dir: str | Path,
    checkpoint: str | Path | None = None,
    *,
    stochastic: bool = False,
    seed: int | None = None,
    trust: bool = False,
) -> Policy | dict[str, Policy]:
    """The policy of a run's newest valid checkpoint (or `checkpoint`: a file, or a name in
    RUN_DIR/checkpoints/), greedy unless `stochastic` (then drawn from noise seeded by `seed`). A
    multi-agent run gives {policy id: Policy}. Read as `rlpar evaluate` reads a run (weights only;
    the code config.yaml names imported only where this user's key signed it, or with `trust`);
    rlpar.runtime.evaluate_run.EvaluateError names what is wrong in one line."""
    from rlpar.models.multi_agent import MultiAgentSpec, policy_weights
    from rlpar.runtime.evaluate_run import load_run

    run_dir = Path(run_dir)
    hint = f"rlpar.load_policy('{run_dir}', trust=True) (or --trust)"
    config, path, target = load_run(run_dir, checkpoint=checkpoint, trust=trust, trust_hint=hint)
    source = {
        "run_dir": str(run_dir.resolve()),
        "checkpoint": path.name,
        "iteration": target.iteration,
        "env_steps": target.env_steps,
        "env": target.env_spec.id or str(target.env_spec.entry_point),
    }
    spec = target.policy_spec
    if not isinstance(spec, MultiAgentSpec):
        observation_space, action_space = _spaces(target.env_spec)
        return Policy(
            spec, target.weights, observation_space, action_space, source=source, stochastic=stochastic, seed=seed
        )
    spaces = _agent_spaces(target.env_spec)
    agent_id = bool(config["env"].get("agent_id"))
    policies = {}
    for p, (name, policy_spec) in enumerate(spec.policies):
        agents = tuple(a for a, q in zip(spec.agents, spec.policy_of) if q == p)
        policies[name] = Policy(
            policy_spec,
            policy_weights(target.weights, name),
            *spaces[agents[0]],
            source=source,
            stochastic=stochastic,
            seed=seed,
            policy_id=name,
            agents=agents if agent_id else (),
        )
    return policies


def _spaces(env_spec) -> tuple[gym.Space, gym.Space]:
    from rlpar.envs.factory import make_env

    env = make_env(env_spec)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _agent_spaces(env_spec) -> dict[str, tuple[gym.Space, gym.Space]]:
    """Each agent's own observation and action spaces."""
    from rlpar.envs.factory import make_parallel_env

    env = make_parallel_env(env_spec)
    try:
        return {agent: (env.observation_space(agent), env.action_space(agent)) for agent in env.possible_agents}
    finally:
        env.close()
