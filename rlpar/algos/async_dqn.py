"""Asynchronous n-step Q-learning (Mnih et al. 2016, Algorithm S3), the seed designs' "Ray-DQN":
A3C's machinery with a Q-network.

One iteration: as A3C (rlpar.algos.a3c), but each worker's gradient is of the n-step Q-learning
loss on its own rollout (rlpar.learning.losses.nstep_q), bootstrapped from a target network that the
parameter server refreshes with a hard copy every `target_update_every` applied gradients and
hands out with the weights. No replay: every transition is learned from once, by the worker that
collected it, as in the paper.

Exploration: environment i of N acts ε-greedily with its own fixed ε_i = 0.4^(1 + 7 i / (N - 1))
(Ape-X's spread, rlpar.learning.exploration, in place of the paper's three sampled final ε); the
run's episode statistics count the greedier half of the environments, and
`episode_return_mean_all` all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlpar.algos.a2c import A2CConfig
from rlpar.algos.a3c import A3C, A3CConfig
from rlpar.learning.exploration import SpreadEpsilons
from rlpar.learning.losses.nstep_q import NStepQLoss
from rlpar.typed_config import integer, number, override


@dataclass(frozen=True, kw_only=True)
class AsyncDQNConfig(A3CConfig):
    """A3C's keys less the actor-critic objective's (its workers compute n-step Q-learning's),
    with a target network and each actor's fixed exploration rate."""

    target_update_every: int = integer(500, low=1)  # server updates between target-network copies
    exploration_epsilon: float = number(0.4, low=0, high=1, low_open=True)
    exploration_alpha: float = number(7.0, low=0)
    advantage: str = override(A2CConfig, "advantage", "nstep", fixed=True)
    gae_lambda: float = override(A2CConfig, "gae_lambda", 1.0, fixed=True)
    value_coef: float = override(A2CConfig, "value_coef", 0.5, fixed=True)
    entropy_coef: float = override(A2CConfig, "entropy_coef", 0.01, fixed=True)
    normalize_advantages: bool = override(A2CConfig, "normalize_advantages", False, fixed=True)


class AsyncDQN(A3C):
    model_kind = "q_network"
    action_spaces = ("Discrete",)
    Config = AsyncDQNConfig

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        return {
            "objective": NStepQLoss(gamma=algo_config["gamma"], n_steps=algo_config["n_steps"]),
            "reward_scale": algo_config["reward_scale"],
            "reward_clip": algo_config.get("reward_clip"),
            "precision": algo_config.get("precision", "fp32"),
        }

    def __init__(self, config: AsyncDQNConfig, **built):
        """`built`: what the builder passes every algorithm (sampler, policy_spec, total_steps, seed, device)."""
        self.target_update_every = config.target_update_every
        self.epsilons = SpreadEpsilons(
            num_envs=built["sampler"].num_envs, epsilon=config.exploration_epsilon, alpha=config.exploration_alpha
        )
        self.all_returns_mean: float | None = None
        super().__init__(config, **built)

    def acting_options(self) -> dict:
        return {"epsilon": self.epsilons.values}

    def training_step(self):
        result = super().training_step()
        result.metrics.update(epsilon=self.epsilons.median, episode_return_mean_all=self.all_returns_mean)
        return result

    def reported_episodes(self, batch) -> tuple[list, list]:
        self.all_returns_mean = float(np.mean(batch.episode_returns)) if batch.episode_returns else None
        return self.epsilons.greedier_episodes(batch)
