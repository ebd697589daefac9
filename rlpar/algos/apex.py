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

from rlpar.algos.dqn import DQN
from rlpar.algos.sharded_replay import ShardedReplay
from rlpar.learning.exploration import SpreadEpsilons


class ApeX(ShardedReplay, DQN):
    # Each actor's ε is fixed by exploration_epsilon and exploration_alpha, not scheduled; actors
    # write raw rewards (clipped when reward_clip is set), unscaled; no sequences (feed-forward only).
    KEYWORDS_NOT_FORWARDED = (
        "epsilon_start",
        "epsilon_end",
        "exploration_steps",
        "reward_scale",
        "burn_in",
        "sequence_length",
    )

    def __init__(self, *, exploration_epsilon: float = 0.4, exploration_alpha: float = 7.0, **dqn_kwargs):
        """`dqn_kwargs`: DQN's (lr, gamma, n_step, batch_size, replay_ratio, replay, ...)."""
        self.exploration = SpreadEpsilons(
            num_envs=dqn_kwargs["sampler"].num_envs,
            epsilon=exploration_epsilon,
            alpha=exploration_alpha,
        )
        super().__init__(**dqn_kwargs)

    def epsilon(self) -> float:
        """The median actor's."""
        return self.exploration.median

    def get_weights(self) -> dict:
        """The per-environment rates, with the shards' addresses."""
        return {**super().get_weights(), "epsilon": self.exploration.values}
