"""Deterministic-policy evaluation on fresh environments, away from the training envs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from rlpar.envs.factory import EnvSpec, make_env
from rlpar.envs.spaces import ActionMapper, flatten_observation_fn
from rlpar.models.multi_agent import POLICY_PREFIX
from rlpar.models.spec import PolicySpec

EVAL_SEED_OFFSET = 10_000  # evaluation episode i runs on seed + 10_000 + i, away from training's seeds


def evaluate_policy(weights: dict, *, policy_spec: PolicySpec, env_spec: EnvSpec, num_episodes: int, seed: int,
                    max_steps: int = 100_000, render_mode: str | None = None,
                    wrap_env: Callable[[gym.Env], gym.Env] | None = None, episodes: list | None = None) -> dict:
    """Greedy actions (argmax or Gaussian mean); returns mean/std/min/max of episode returns. A
    recurrent policy starts each episode from a zero state and carries it from step to step.

    `render_mode` is passed to the environment (`rgb_array` for videos), `wrap_env` wraps it
    (e.g. in Gymnasium's RecordVideo), and `episodes`, when given, receives each episode's
    (return, length)."""
    if render_mode is not None:
        env_spec = replace(env_spec, kwargs={**env_spec.kwargs, "render_mode": render_mode})
    env = make_env(env_spec)
    if wrap_env is not None:
        try:
            env = wrap_env(env)
        except BaseException:
            env.close()
            raise
    space = env.observation_space
    flatten = flatten_observation_fn(space)  # training's own rows, from a batch of one observation
    batch = create_empty_array(space, 1)
    policy = policy_spec.acting_policy()
    policy.set_weights(weights)
    mapper = ActionMapper(policy_spec.action)
    agents = getattr(policy_spec, "agents_per_env", 0)  # a multi-agent env: its agents' rows, its team's reward
    returns = []
    try:
        for episode in range(num_episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, steps, done = 0.0, 0, False
            state = np.zeros((1, policy.state_size)) if policy.state_size else None  # a recurrent policy's memory
            while not done and steps < max_steps:
                rows = flatten(concatenate(space, [obs], batch))
                x = policy.normalize(rows.reshape(agents, -1) if agents else rows)
                action, _, _ = policy.act(x, None, state)  # advances `state`
                obs, reward, terminated, truncated, _ = env.step(mapper.to_env(action) if agents else mapper.to_env(action)[0])
                total += float(reward)
                steps += 1
                done = terminated or truncated
            returns.append(total)
            if episodes is not None:
                episodes.append((total, steps))
    finally:
        env.close()
    arr = np.asarray(returns)
    return {
        "eval_return_mean": float(arr.mean()),
        "eval_return_std": float(arr.std()),
        "eval_return_min": float(arr.min()),
        "eval_return_max": float(arr.max()),
        "eval_episodes": num_episodes,
    }


def checkpoint_policy_weights(algorithm_state: dict) -> dict:
    """The acting policy's weights held in a checkpoint's `algorithm` section, as numpy: the
    learner's model, or the parameter server's (A3C and async DQN outside shared memory), or
    every policy's of a multi-agent algorithm (a section each, rlpar.algos.mappo)."""
    if "policies" in algorithm_state:
        return {f"{POLICY_PREFIX}{name}.{key}": value for name, section in algorithm_state["policies"].items()
                for key, value in checkpoint_policy_weights(section).items()}
    model = algorithm_state.get("model")
    if model is None:
        model = (algorithm_state.get("server") or {}).get("model")
    if model is None:
        raise KeyError("neither 'model' nor 'server.model' in the checkpoint's algorithm state")
    return {name: value.detach().cpu().numpy() for name, value in model.items()}
