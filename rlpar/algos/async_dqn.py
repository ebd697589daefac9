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

import numpy as np

from rlpar.algos.a3c import A3C
from rlpar.learning.exploration import SpreadEpsilons
from rlpar.learning.losses.nstep_q import NStepQLoss


class AsyncDQN(A3C):
    model_kind = "q_network"
    action_spaces = ("Discrete",)
    # The actor-critic objective's keys, and reward normalisation (workers see raw rewards). A plain
    # assignment, read by rlpar.config.known_keys: mypy takes A3C's 1-tuple for its type.
    KEYWORDS_NOT_FORWARDED = (  # type: ignore[assignment]
        "normalize_rewards",
        "advantage",
        "gae_lambda",
        "value_coef",
        "entropy_coef",
        "normalize_advantages",
    )

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        return {
            "objective": NStepQLoss(gamma=algo_config["gamma"], n_steps=algo_config["n_steps"]),
            "reward_scale": algo_config["reward_scale"],
            "reward_clip": algo_config.get("reward_clip"),
            "precision": algo_config.get("precision", "fp32"),
        }

    def __init__(
        self,
        *,
        target_update_every: int = 500,
        exploration_epsilon: float = 0.4,
        exploration_alpha: float = 7.0,
        **a3c_kwargs,
    ):
        """`a3c_kwargs`: A3C's (lr, optimizer, gamma, n_steps, max_grad_norm, ...)."""
        self.target_update_every = target_update_every
        self.epsilons = SpreadEpsilons(
            num_envs=a3c_kwargs["sampler"].num_envs, epsilon=exploration_epsilon, alpha=exploration_alpha
        )
        self.all_returns_mean: float | None = None
        super().__init__(**a3c_kwargs)

    def acting_options(self) -> dict:
        return {"epsilon": self.epsilons.values}

    def training_step(self):
        result = super().training_step()
        result.metrics.update(epsilon=self.epsilons.median, episode_return_mean_all=self.all_returns_mean)
        return result

    def reported_episodes(self, batch) -> tuple[list, list]:
        self.all_returns_mean = float(np.mean(batch.episode_returns)) if batch.episode_returns else None
        return self.epsilons.greedier_episodes(batch)
