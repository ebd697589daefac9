"""Policy evaluation on fresh environments, away from the training envs: deterministic by
default, or sampling actions as the policy does in training."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from rlpar.envs.factory import EnvSpec, make_env
from rlpar.envs.spaces import ActionMapper, draw_noise, flatten_observation_fn
from rlpar.models.multi_agent import POLICY_PREFIX
from rlpar.models.spec import PolicySpec

EVAL_SEED_OFFSET = 10_000  # evaluation episode i runs on seed + 10_000 + i, away from training's seeds
ACTION_NOISE_STREAM = 1  # a stochastic episode's action noise: its own stream beside the environment's seed
EVAL_EPSILON = 0.05  # a Q-network's stochastic evaluation: ε-greedy at the ε Mnih et al. (2015) evaluated with


def evaluate_policy(
    weights: dict,
    *,
    policy_spec: PolicySpec,
    env_spec: EnvSpec,
    num_episodes: int,
    seed: int,
    max_steps: int = 100_000,
    render_mode: str | None = None,
    wrap_env: Callable[[gym.Env], gym.Env] | None = None,
    episodes: list | None = None,
    stochastic: bool = False,
    opponent_weights: dict | None = None,
) -> dict:
    """Greedy actions (argmax or Gaussian mean), or with `stochastic` actions drawn as the policy
    draws them in training (its distribution; a Q-network's ε-greedy, at EVAL_EPSILON whether the
    weights come from a checkpoint or from training, whose ε is a schedule's),
    from noise seeded by the episode's seed; returns mean/std/min/max of episode returns. A
    recurrent policy starts each episode from a zero state and carries it from step to step.

    `render_mode` is passed to the environment (`rgb_array` for videos), `wrap_env` wraps it
    (e.g. in Gymnasium's RecordVideo), and `episodes`, when given, receives each episode's
    (return, length).

    A turn-based game (rlpar.envs.pettingzoo.TurnBasedGame) is played against its opponent: with
    `opponent_weights` a copy of the policy with those weights (another checkpoint), else its
    `env.opponent` (`self`: the evaluated policy itself, greedy or stochastic as it is); the result
    adds its win, draw and loss rates, the win rate of the games where the policy moved first
    (the seat alternates with the episode's seed) and the illegal moves it sent."""
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
    batch: Any = create_empty_array(space, 1)  # the space's batch of one: an array, dict or tuple
    policy = acting_copy(policy_spec, weights, stochastic)
    mapper = ActionMapper(policy_spec.action)
    agents = getattr(policy_spec, "agents_per_env", 0)  # a multi-agent env: its agents' rows, its team's reward
    hand_opponent = getattr(env.unwrapped, "set_opponent_policy", None)
    if hand_opponent is not None:
        opponent = policy
        if opponent_weights is not None:
            opponent = policy_spec.acting_policy()
            opponent.set_weights(opponent_weights)
        hand_opponent(opponent)
    returns, games = [], []
    try:
        for episode in range(num_episodes):
            obs, _ = env.reset(seed=seed + episode)
            noise_rng = np.random.default_rng([seed + episode, ACTION_NOISE_STREAM]) if stochastic else None
            total, steps, done = 0.0, 0, False
            state = np.zeros((1, policy.state_size)) if policy.state_size else None  # a recurrent policy's memory
            while not done and steps < max_steps:
                rows = flatten(concatenate(space, [obs], batch))
                x = policy.normalize(rows.reshape(agents, -1) if agents else rows)
                noise = None if noise_rng is None else acting_noise(noise_rng, policy_spec.action, policy, len(x))
                action, _, _ = policy.act(x, noise, state)  # advances `state`
                obs, reward, terminated, truncated, info = env.step(
                    mapper.to_env(action) if agents else mapper.to_env(action)[0]
                )
                total += float(reward)
                steps += 1
                done = terminated or truncated
            returns.append(total)
            if "game_outcome" in info:
                games.append(info)
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
        **(game_outcomes(games) if games else {}),
    }


def acting_copy(policy_spec: PolicySpec, weights: dict, stochastic: bool):
    """The acting copy evaluation plays with: `weights` loaded, and a Q-network's ε at EVAL_EPSILON
    when it acts `stochastic` (greedy actions ignore it)."""
    policy = policy_spec.acting_policy()
    policy.set_weights(weights)
    if stochastic and hasattr(policy, "epsilon"):
        policy.epsilon = np.full(1, EVAL_EPSILON)
    return policy


def acting_noise(generator: np.random.Generator, action, policy, rows: int) -> np.ndarray:
    """A stochastic step's noise for `rows` rows, in the dtype the copy draws with."""
    dtype = getattr(policy, "dtype", np.float64) if action.discrete else np.float32
    return draw_noise(generator, action, rows).astype(dtype, copy=False)


def game_outcomes(games: list[dict]) -> dict:
    """Win, draw and loss rates of turn-based games' final `info` (rlpar.envs.pettingzoo.TurnBasedGame),
    the win rate of those where the policy moved first, and the illegal moves it sent."""
    outcomes = np.array([int(g["game_outcome"]) for g in games])
    first = np.array([bool(g["moved_first"]) for g in games])
    return {
        "win_rate": float(np.mean(outcomes > 0)),
        "draw_rate": float(np.mean(outcomes == 0)),
        "loss_rate": float(np.mean(outcomes < 0)),
        "first_mover_win_rate": float(np.mean(outcomes[first] > 0)) if first.any() else float("nan"),
        "first_mover_games": int(first.sum()),
        "illegal_actions": int(sum(int(g["illegal_actions"]) for g in games)),
    }


def policy_kind(stochastic: bool) -> str:
    """What an evaluations.jsonl row says of the actions it took."""
    return "stochastic" if stochastic else "deterministic"


def checkpoint_policy_weights(algorithm_state: dict) -> dict:
    """The acting policy's weights held in a checkpoint's `algorithm` section, as numpy: the
    learner's model, or the parameter server's (A3C and async DQN outside shared memory), or
    every policy's of a multi-agent algorithm (a section each, rlpar.algos.mappo)."""
    if "policies" in algorithm_state:
        return {
            f"{POLICY_PREFIX}{name}.{key}": value
            for name, section in algorithm_state["policies"].items()
            for key, value in checkpoint_policy_weights(section).items()
        }
    model = algorithm_state.get("model")
    if model is None:
        model = (algorithm_state.get("server") or {}).get("model")
    if model is None:
        raise KeyError("neither 'model' nor 'server.model' in the checkpoint's algorithm state")
    return {name: value.detach().cpu().numpy() for name, value in model.items()}
