"""Ape-X (Horgan et al. 2018): many actors, each exploring at its own rate, feed a prioritised
replay split over shards; one learner samples it and sends back new priorities.

One iteration: take the rollouts that have arrived (actors never wait for each other:
`non_blocking`) -> the actors' n-step transitions, prioritised by the |n-step TD error| under
their own Q copy, are in the replay shards (rlpar.algos.sharded_replay: the shards, their rate
limiters and restarts) -> DQN's gradient steps (double-Q, n-step, Huber, importance weights) for
as long as the shards' rate limiters allow -> new priorities back to the shards -> weights, the
per-environment ε and the shard handles published to the actors.

Exploration: environment i of N explores with ε_i = ε^(1 + α i / (N - 1)) (ε = 0.4, α = 7:
Ape-X's per-actor rates, with one environment per actor exactly the paper's).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlpar.algos.dqn import DQN, DQNConfig
from rlpar.algos.sharded_replay import ShardedReplay
from rlpar.learning.exploration import SpreadEpsilons
from rlpar.typed_config import number, override


@dataclass(frozen=True, kw_only=True)
class ApeXConfig(DQNConfig):
    """DQN's keys, less those it fixes: each actor's ε is set by exploration_epsilon and
    exploration_alpha, not scheduled; actors write raw rewards (clipped when reward_clip is set),
    unscaled; no sequences (feed-forward only)."""

    exploration_epsilon: float = number(0.4, low=0, high=1, low_open=True)
    exploration_alpha: float = number(7.0, low=0)
    epsilon_start: float = override(DQNConfig, "epsilon_start", 1.0, fixed=True)
    epsilon_end: float = override(DQNConfig, "epsilon_end", 0.05, fixed=True)
    exploration_steps: int = override(DQNConfig, "exploration_steps", 10_000, fixed=True)
    reward_scale: float = override(DQNConfig, "reward_scale", 1.0, fixed=True)
    burn_in: int = override(DQNConfig, "burn_in", 8, fixed=True)
    sequence_length: int = override(DQNConfig, "sequence_length", 16, fixed=True)


class ApeX(ShardedReplay, DQN):
    Config = ApeXConfig

    def __init__(self, config: ApeXConfig, **built):
        """`built`: what the builder passes every algorithm (sampler, policy_spec, total_steps, seed, device)."""
        self.exploration = SpreadEpsilons(
            num_envs=built["sampler"].num_envs,
            epsilon=config.exploration_epsilon,
            alpha=config.exploration_alpha,
        )
        super().__init__(config, **built)

    def epsilon(self) -> float:
        """The median actor's."""
        return self.exploration.median

    def get_weights(self) -> dict:
        """The per-environment rates, with the shards' addresses."""
        return {**super().get_weights(), "epsilon": self.exploration.values}
