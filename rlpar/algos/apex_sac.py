"""SAC and TD3 the Ape-X way (Horgan et al. 2018 applied its distributed replay to continuous
control too, as Ape-X DPG): many actors, each exploring at its own rate, write their n-step
transitions into replay shards that hold a rate limiter; one learner samples them
(rlpar.algos.sharded_replay: the shards, their limiters and restarts).

`algo=apex_sac` and `algo=apex_td3` (conf/algo/apex_sac.yaml, apex_td3.yaml), with
parallel=distributed only: they declare `needs_ray`, and a sampler without Ray refuses them
(`algo=sac` and `algo=td3` keep the learner's own replay on every sampler). Exploration:
environment i of N scales its noise (SAC: its own Gaussian's; TD3: the added Gaussian's standard
deviation) by a rate spread evenly on a log scale from `noise_scale_low` to `noise_scale_high`
(TD3: times exploration_noise), so some actors act nearly greedily and some explore widely; the
run's episode statistics count the greedier half.
"""

from __future__ import annotations

from rlpar.algos.sac import SAC
from rlpar.algos.sharded_replay import ShardedReplay
from rlpar.algos.td3 import TD3
from rlpar.learning.exploration import SpreadNoiseScales


class ApeXSAC(ShardedReplay, SAC):
    needs_ray = True  # its actors and replay shards are Ray actors: a sampler that uses Ray (parallel=distributed)
    without_ray = "sac"  # what to run instead on a sampler without Ray: the learner's own replay

    def __init__(self, *, noise_scale_low: float = 0.5, noise_scale_high: float = 1.5, **sac_kwargs):
        """`sac_kwargs`: SAC's (lr, gamma, n_step, batch_size, replay_ratio, replay, ...)."""
        self.exploration = SpreadNoiseScales(
            num_envs=sac_kwargs["sampler"].num_envs, low=noise_scale_low, high=noise_scale_high
        )
        super().__init__(**sac_kwargs)

    def noise_scale(self):
        return self.exploration.values


class ApeXTD3(ShardedReplay, TD3):
    needs_ray = True
    without_ray = "td3"

    def __init__(self, *, noise_scale_low: float = 0.5, noise_scale_high: float = 2.0, **td3_kwargs):
        """`td3_kwargs`: TD3's (exploration_noise, target_noise, policy_delay, ...)."""
        self.exploration = SpreadNoiseScales(
            num_envs=td3_kwargs["sampler"].num_envs, low=noise_scale_low, high=noise_scale_high
        )
        super().__init__(**td3_kwargs)

    def noise_scale(self):
        return self.exploration_noise * self.exploration.values
