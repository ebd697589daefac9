"""Multi-agent PPO for PettingZoo environments (`env=pettingzoo`): IPPO and MAPPO.

Rows of a batch are agents (rlpar/envs/pettingzoo.py), and agents map to policies
(`env.policies`: one shared policy, or one per group). Each policy is learned by its own PPO
learner (rlpar.algos.ppo) from its agents' columns: its own optimiser, statistics, metrics
(`<policy>/...`) and checkpoint section. One iteration: act with every policy -> each policy's
columns -> GAE and minibatch epochs per policy -> new weights for all.

- IPPO (de Witt et al. 2020): each agent's critic reads its own observation.
- MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
  Games"): the critic reads the agent-specific global state, the agent's row followed by the
  environment's `state()` (or all agents' observations: env.global_state), while the actor reads
  only the agent's own observation (PolicySpec.actor_inputs); values are learned normalised
  (model.value_norm). Both take MAPPO's other choices through their configs.

The team's return (the sum over its agents of an environment's episode) is the run's episode
return; every policy's agents' returns are logged beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rlpar.algos.base import Algorithm, AlgorithmConfig, StepResult
from rlpar.algos.ppo import PPO, PPOConfig
from rlpar.learning.peers import BatchShape
from rlpar.models.modules.policy_set import PolicySet
from rlpar.typed_config import integer, override


@dataclass(frozen=True, kw_only=True)
class IPPOConfig(PPOConfig):
    """PPO's keys, which every policy's learner takes, with the minibatches counted rather than
    sized: a policy's share of the batch depends on its agents (each learner sizes its
    minibatches from it: PolicyLearner), and feed-forward policies only (no sequence pieces)."""

    minibatches: int = integer(8, low=1)  # per epoch, each policy's batch cut into this many (num_mini_batch)
    minibatch_size: int = override(PPOConfig, "minibatch_size", 64, fixed=True)
    sequence_length: int | None = override(PPOConfig, "sequence_length", None, fixed=True)


class PolicyLearner(PPO):
    """One policy's PPO learner in IPPO and MAPPO: it learns its agents' columns of each batch in
    `minibatches` minibatches an epoch, however many valid steps they hold."""

    def __init__(self, config: IPPOConfig, **built):
        super().__init__(config, **built)
        self.minibatches = config.minibatches

    def minibatch_size_for(self, steps: int) -> int:
        return max(steps // self.minibatches, 1)


class IPPO(Algorithm):
    multi_agent = True  # it learns PettingZoo environments' agents (env=pettingzoo), and only those
    centralised_critic = False  # its critic reads the global state: rows carry it (env.global_state)
    data_parallel = False
    not_data_parallel_because = (
        "learns each policy with a PPO learner of its own (env.policies), and learners=N "
        "splits the update of one learner, not of a set of them"
    )
    recurrent_policies = False

    Config = IPPOConfig

    def __init__(self, config: IPPOConfig, *, sampler, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        """`config`: PPO's keys, for each policy's learner, and `minibatches`. `total_steps` are
        environment steps; a policy's learner counts its agents' steps (its learning rate
        anneals over its share)."""
        self.learners: dict[str, PolicyLearner] = {}
        for p, (name, spec) in enumerate(policy_spec.policies):
            agents = policy_spec.policy_of.count(p)
            self.learners[name] = PolicyLearner(  # a learner that never samples: told its batches' shape
                config,
                sampler=BatchShape(
                    rollout_length=sampler.rollout_length, num_envs=len(policy_spec.rows_of(p, sampler.num_envs))
                ),
                policy_spec=spec,
                total_steps=total_steps * agents,
                seed=seed + p,
                device=device,
            )
        policies = PolicySet({name: learner.model for name, learner in self.learners.items()})
        super().__init__(  # the learners see the rewards; the set itself keeps no statistics of them
            AlgorithmConfig(gamma=config.gamma),
            sampler=sampler,
            policy_spec=policy_spec,
            total_steps=total_steps,
            seed=seed,
            device=device,
            model=policies,
        )
        self.optimizer = None  # each learner keeps its own

    def training_step(self) -> StepResult:
        full_batch = getattr(self.sampler, "sync_mode", "blocking") == "non_blocking"  # as PPO's
        batch, metrics = self.sample(min_rollouts=self.sampler.num_rollout_workers if full_batch else 1)
        start = time.perf_counter()
        metrics.update(self.update(batch))
        metrics["time_learn_s"] = time.perf_counter() - start
        return StepResult(batch.num_steps, batch.team_returns, batch.team_lengths, metrics)

    def update(self, batch) -> dict:
        """Each policy's PPO update on its agents' columns; their diagnostics under `<policy>/`."""
        metrics, columns = {}, batch.rewards.shape[1]
        for p, (name, learner) in enumerate(self.learners.items()):
            spec = learner.policy_spec
            part = batch.columns(self.policy_spec.rows_of(p, columns), obs_width=spec.obs_dim)
            stats = learner.update(part)
            if part.episode_returns:
                stats["agent_return_mean"] = float(np.mean(part.episode_returns))
            metrics.update({f"{name}/{key}": value for key, value in stats.items()})
        self.version += 1
        metrics["policy_version"] = self.version
        metrics["agent_steps"] = int(batch.rewards.size)
        if batch.episode_returns:
            metrics["agent_return_mean"] = float(np.mean(batch.episode_returns))
        if batch.team_returns:
            metrics["team_return_mean"] = float(np.mean(batch.team_returns))
            metrics["team_length_mean"] = float(np.mean(batch.team_lengths))
        return metrics

    def state_dict(self) -> dict:
        """A section per policy (its weights, optimiser, statistics and shuffles)."""
        return {
            "version": self.version,
            "policies": {name: learner.state_dict() for name, learner in self.learners.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        missing = set(self.learners) ^ set(state["policies"])
        if missing:
            raise ValueError(
                f"the checkpoint's policies {sorted(state['policies'])} are not this run's "
                f"{sorted(self.learners)} (env.policies changed?)"
            )
        for name, learner in self.learners.items():
            learner.load_state_dict(state["policies"][name])
        self.version = int(state["version"])


class MAPPO(IPPO):
    """IPPO with a centralised critic: see the module docstring."""

    centralised_critic = True
