"""One environment built, described, reset and stepped before a run: validation names what is wrong
with it, and the build reads its spaces from the same probe instead of building another."""

from __future__ import annotations

from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np

from rlpar.envs.contract import observation_problem, reward_problem
from rlpar.envs.factory import EnvSpec, make_env
from rlpar.envs.spaces import (
    ACTION_MASK_KEY,
    ActionInfo,
    ObservationInfo,
    describe_action_space,
    describe_observation_space,
    whitened_by_default,
)
from rlpar.envs.state_pickle import state_pickle_problem
from rlpar.envs.wrapping import unsupported_space_hint
from rlpar.errors import first_line

PROBE_STEPS = 5


@dataclass(frozen=True)
class EnvProbe:
    """What one environment of `spec` showed. `problem`: why it cannot be trained on (it could
    not be built, or its spaces cannot be described), in one line; then the other fields are None.
    `step_problem`: what it did wrong when reset and stepped (observations outside its space,
    NaN, a failing step), or None. `state_problem`: why its state cannot travel in a checkpoint
    (rlpar.envs.state_pickle: it is pickled, unpickled and stepped beside the original once), or
    None; checked only when it was stepped."""

    spec: EnvSpec
    problem: str | None = None
    observation: ObservationInfo | None = None
    action: ActionInfo | None = None
    action_space: gym.Space | None = None
    vector_observations: bool = False  # a Box of vectors: `auto` reward normalisation is on exactly then
    whitened: bool = False  # what `model.normalize_obs=auto` becomes (rlpar.envs.spaces.whitened_by_default)
    step_problem: str | None = None
    agents: object | None = None  # env=pettingzoo: its AgentLayout (rlpar/envs/pettingzoo.py)
    state_problem: str | None = None

    @property
    def name(self) -> str:
        return self.spec.id or str(self.spec.entry_point)


def probe_env(spec: EnvSpec, *, steps: int = PROBE_STEPS, mask_key: str | None = ACTION_MASK_KEY) -> EnvProbe:
    """Build one environment of `spec`, describe its spaces, then reset it and take `steps` random
    steps (0: no reset, spaces only), legal ones where its Dict observation holds a mask of them
    under `mask_key`."""
    name = spec.id or str(spec.entry_point)
    if spec.kind == "pettingzoo":
        return _probe_multi_agent(spec, name, steps, mask_key)
    try:
        env = make_env(spec)
    except BaseException as err:  # user code: any exception, MemoryError included
        if isinstance(err, KeyboardInterrupt):
            raise
        return EnvProbe(
            spec, f"env: building {name} with env.kwargs {spec.kwargs} failed ({type(err).__name__}: {first_line(err)})"
        )
    try:
        try:
            observation = describe_observation_space(env.observation_space)
            action = describe_action_space(env.action_space)
        except TypeError as err:
            return EnvProbe(spec, f"env: {err}{unsupported_space_hint(env)}")
        step_problem, last_obs = _step_problem(env, name, steps, mask_key) if steps else (None, None)
        if steps and step_problem is None:
            sampled = random_action(env.action_space, last_obs, mask_key)
            state_problem = state_pickle_problem(env, lambda copy: copy.step(sampled)[:2])
        else:
            state_problem = None
        return EnvProbe(
            spec,
            observation=observation,
            action=action,
            action_space=env.action_space,
            vector_observations=isinstance(env.observation_space, gym.spaces.Box) and not observation.image_shape,
            whitened=whitened_by_default(env.observation_space),
            step_problem=step_problem,
            state_problem=state_problem,
        )
    finally:
        env.close()


def _probe_multi_agent(spec: EnvSpec, name: str, steps: int, mask_key: str | None) -> EnvProbe:
    """A PettingZoo environment's agents, laid out as rows (rlpar/envs/pettingzoo.py), then
    `steps` random steps of every agent, legal ones where its observation holds a mask."""
    from rlpar.envs.factory import make_parallel_env, multi_agent_vector_env
    from rlpar.envs.pettingzoo import agent_layout

    try:
        env = make_parallel_env(spec)
    except BaseException as err:  # user code: any exception
        if isinstance(err, KeyboardInterrupt):
            raise
        where = f"env.entry_point {name}" if spec.entry_point else f"env.id {name} (a PettingZoo module)"
        return EnvProbe(
            spec,
            f"env: building {where} with env.kwargs {spec.kwargs} failed ({type(err).__name__}: {first_line(err)})",
        )
    try:
        layout = agent_layout(env, policies=spec.policies, agent_id=spec.agent_id, global_state=spec.global_state)
    except (ValueError, TypeError) as err:
        message = first_line(err)
        return EnvProbe(spec, message if message.startswith("env") else f"env: {name}: {message}")
    finally:
        env.close()
    row = gym.spaces.Box(-np.inf, np.inf, (layout.row_dim,), np.float32)
    probe = EnvProbe(
        spec,
        observation=describe_observation_space(row),
        action=layout.column_action,
        agents=layout,
        vector_observations=True,
        whitened=True,
    )
    if not steps:
        return probe
    stage, venv = "reset", None
    try:
        venv = multi_agent_vector_env(spec)
        obs, _ = venv.reset(seed=0)
        for step in range(steps):
            stage = f"step {step + 1}"
            obs, rewards, *_ = venv.step(random_agent_actions(venv, obs, mask_key))  # one environment
            if not (np.all(np.isfinite(obs)) and np.all(np.isfinite(rewards))):
                return replace(
                    probe, step_problem=f"env: {name} returned NaN or infinite observations or rewards at {stage}"
                )
        actions = random_agent_actions(venv, obs, mask_key)
        return replace(probe, state_problem=state_pickle_problem(venv, lambda copy: copy.step(actions)[:2]))
    except Exception as err:
        return replace(probe, step_problem=f"env: {name} failed in {stage} ({type(err).__name__}: {first_line(err)})")
    finally:
        if venv is not None:
            venv.close()


def random_agent_actions(venv, rows: np.ndarray, mask_key: str | None) -> np.ndarray:
    """A random action per agent of one multi-agent environment (a MultiAgentVectorEnv of one),
    legal where the agent's row holds its mask under `mask_key`."""
    actions = []
    for a, space in enumerate(venv.action_spaces):
        columns = next((c for key, *c in venv.layout.obs_keys[a] if key == mask_key), None) if mask_key else None
        obs = {mask_key: rows[a, columns[0] : columns[1]]} if columns else None
        actions.append(random_action(space, obs, mask_key))
    return np.stack(actions)


def random_action(space: gym.Space, obs, mask_key: str | None):
    """A random action of `space`, among the legal ones where the Dict observation `obs` holds a
    0/1 mask of them under `mask_key` (Discrete, or MultiDiscrete per factor): an environment may
    refuse an illegal action."""
    mask = obs.get(mask_key) if mask_key is not None and isinstance(obs, dict) else None
    if mask is not None:
        legal = np.asarray(mask).reshape(-1).astype(np.int8)
        if isinstance(space, gym.spaces.Discrete) and legal.size == space.n and legal.any():
            return space.sample(mask=legal)
        if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1 and legal.size == space.nvec.sum():
            factors = tuple(np.split(legal, np.cumsum(space.nvec)[:-1]))
            if all(factor.any() for factor in factors):
                return space.sample(mask=factors)
    return space.sample()


def _step_problem(env: gym.Env, name: str, steps: int, mask_key: str | None):
    """Reset and step `env`: an environment that lies about its observations is named now. Returns
    the problem (or None) and the last observation."""
    space = env.observation_space
    box = isinstance(space, gym.spaces.Box)
    env.action_space.seed(0)
    stage, obs = "reset", None
    try:
        obs, _ = env.reset(seed=0)
        for step in range(steps + 1):
            if problem := observation_problem(obs, space):
                return f"env: {name} returned {problem} (at {stage})", obs
            values = obs if box else gym.spaces.flatten(space, obs)
            if not np.all(np.isfinite(np.asarray(values, dtype=np.float64))):
                return f"env: {name} returned NaN or infinite observations after {stage}", obs
            if step == steps:
                break
            stage = f"step {step + 1}"
            obs, reward, terminated, truncated, _ = env.step(random_action(env.action_space, obs, mask_key))
            if problem := reward_problem(reward):
                return f"env: {name} returned {problem} (at {stage})", obs
            if terminated or truncated:
                stage = "reset"
                obs, _ = env.reset()
    except Exception as err:
        return f"env: {name} failed in {stage} ({type(err).__name__}: {first_line(err)})", obs
    return None, obs
