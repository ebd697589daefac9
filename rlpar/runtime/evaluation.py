"""Deterministic-policy evaluation on fresh environments, away from the training envs."""

from __future__ import annotations

import numpy as np

from rlpar.envs.factory import EnvSpec, make_env
from rlpar.envs.spaces import ActionMapper, flatten_observation_fn
from rlpar.models.spec import PolicySpec


def evaluate_policy(weights: dict, *, policy_spec: PolicySpec, env_spec: EnvSpec, num_episodes: int, seed: int, max_steps: int = 100_000) -> dict:
    """Greedy actions (argmax or Gaussian mean); returns mean/std/min/max of episode returns."""
    env = make_env(env_spec)
    flatten = flatten_observation_fn(env.observation_space)
    policy = policy_spec.acting_policy()
    policy.set_weights(weights)
    mapper = ActionMapper(policy_spec.action)
    returns = []
    try:
        for episode in range(num_episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, steps, done = 0.0, 0, False
            while not done and steps < max_steps:
                x = policy.normalize(flatten(np.asarray(obs)[None]))
                action, _, _ = policy.act(x, None)
                obs, reward, terminated, truncated, _ = env.step(mapper.to_env(action)[0])
                total += float(reward)
                steps += 1
                done = terminated or truncated
            returns.append(total)
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
