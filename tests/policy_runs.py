"""Tiny real training runs for the tests of a policy outside its run (rlpar.serving): load_policy,
export and serve read their directories as a user's, and each run trains in seconds in the test's
own process."""

from pathlib import Path

import gymnasium as gym
import numpy as np

from rlpar.config.compose import compose_config
from rlpar.runtime.run import run

# name -> (the environment, the overrides): the four policies of the bars
BAR_RUNS = {
    "ppo_pendulum": ("Pendulum-v1", ["env=pendulum", "total_steps=2048"]),  # whitened observations, a Gaussian
    "ppo_lstm_cartpole": ("CartPole-v1", ["model.recurrent=lstm", "total_steps=1024"]),
    "sac_pendulum": ("Pendulum-v1", ["algo=sac", "env=pendulum", "total_steps=600", "algo.learning_starts=200"]),
    "dqn_cartpole": ("CartPole-v1", ["algo=dqn", "total_steps=1000"]),
}


def trained_run(run_dir: Path, *overrides: str) -> Path:
    """A run of `overrides` trained here to its final checkpoint (written with checkpoint.every=0 too)."""
    run(compose_config(["progress=false", "checkpoint.every=0", *overrides], run_dir=run_dir))
    assert list((run_dir / "checkpoints").glob("*.pt")), "no final checkpoint"
    return run_dir


def episode_returns(act, env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of `episodes` episodes seeded `seed + i` (as rlpar evaluate seeds them), each step's
    action from `act(obs, start)` (`start`: the episode's first step)."""
    env = gym.make(env_id)
    returns = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done, start = 0.0, False, True
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(np.asarray(obs), start))
                total += float(reward)
                done, start = terminated or truncated, False
            returns.append(total)
    finally:
        env.close()
    return returns
