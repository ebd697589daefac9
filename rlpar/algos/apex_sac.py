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

from dataclasses import dataclass

from rlpar.algos.sac import SAC, SACConfig
from rlpar.algos.sharded_replay import ShardedReplay
from rlpar.algos.td3 import TD3, TD3Config
from rlpar.learning.exploration import SpreadNoiseScales
from rlpar.typed_config import number


def noise_scale_problems(config) -> list[str]:
    """The spread's ends in order."""
    low, high = config.get("algo.noise_scale_low"), config.get("algo.noise_scale_high")
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high)) and low > high:
        return [f"algo.noise_scale_low: {low} is above algo.noise_scale_high ({high})"]
    return []


@dataclass(frozen=True, kw_only=True)
class ApeXSACConfig(SACConfig):
    noise_scale_low: float = number(0.5, low=0, low_open=True)  # the greediest actor's noise scale
    noise_scale_high: float = number(1.5, low=0, low_open=True)  # the widest explorer's

    @classmethod
    def config_problems(cls, config) -> list[str]:
        return super().config_problems(config) + noise_scale_problems(config)


@dataclass(frozen=True, kw_only=True)
class ApeXTD3Config(TD3Config):
    noise_scale_low: float = number(0.5, low=0, low_open=True)  # times exploration_noise
    noise_scale_high: float = number(2.0, low=0, low_open=True)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        return super().config_problems(config) + noise_scale_problems(config)


class ApeXSAC(ShardedReplay, SAC):
    needs_ray = True  # its actors and replay shards are Ray actors: a sampler that uses Ray (parallel=distributed)
    without_ray = "sac"  # what to run instead on a sampler without Ray: the learner's own replay
    Config = ApeXSACConfig

    def __init__(self, config: ApeXSACConfig, **built):
        """`built`: what the builder passes every algorithm (sampler, policy_spec, total_steps, seed, device)."""
        self.exploration = SpreadNoiseScales(
            num_envs=built["sampler"].num_envs, low=config.noise_scale_low, high=config.noise_scale_high
        )
        super().__init__(config, **built)

    def noise_scale(self):
        return self.exploration.values


class ApeXTD3(ShardedReplay, TD3):
    needs_ray = True
    without_ray = "td3"

    Config = ApeXTD3Config

    def __init__(self, config: ApeXTD3Config, **built):
        """`built`: what the builder passes every algorithm (sampler, policy_spec, total_steps, seed, device)."""
        self.exploration = SpreadNoiseScales(
            num_envs=built["sampler"].num_envs, low=config.noise_scale_low, high=config.noise_scale_high
        )
        super().__init__(config, **built)

    def noise_scale(self):
        return self.exploration_noise * self.exploration.values
