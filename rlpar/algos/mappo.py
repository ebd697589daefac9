"""Multi-agent PPO for PettingZoo environments (`env=pettingzoo`): IPPO and MAPPO.

Rows of a batch are agents (rlpar/envs/pettingzoo.py), and agents map to policies
(`env.policies`: one shared policy, or one per group). Each policy is learned by its own PPO
learner (rlpar.algos.ppo.PPOLearner) from its agents' columns: its own optimiser, statistics, metrics
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

from rlpar.algos.base import Algorithm, AlgorithmConfig, StepResult, learning_rewards, take_in_batch
from rlpar.algos.ppo import PPOConfig, PPOLearner, ppo_inputs
from rlpar.learning.estimators.reward_normalizer import RewardNormalizer
from rlpar.models.modules.policy_set import PolicySet
from rlpar.typed_config import integer, override


@dataclass(frozen=True, kw_only=True)
class IPPOConfig(PPOConfig):
    """PPO's keys, which every policy's learner takes, with the minibatches counted rather than
    sized: a policy's share of the batch depends on its agents (each update sizes its
    minibatches from it: IPPO.policy_update), and feed-forward policies only (no sequence pieces)."""

    minibatches: int = integer(8, low=1)  # per epoch, each policy's batch cut into this many (num_mini_batch)
    minibatch_size: int = override(PPOConfig, "minibatch_size", 64, fixed=True)
    sequence_length: int | None = override(PPOConfig, "sequence_length", None, fixed=True)


@dataclass
class PolicyCounts:
    """What one policy's updates advance besides its learner: its agents' env steps (its learning
    rate anneals over them), its updates, and its rewards' running statistics."""

    reward_normalizer: RewardNormalizer
    steps_seen: int = 0
    version: int = 0


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
        self.learners: dict[str, PPOLearner] = {}
        self.counts: dict[str, PolicyCounts] = {}
        for p, (name, spec) in enumerate(policy_spec.policies):
            agents = policy_spec.policy_of.count(p)
            self.learners[name] = PPOLearner(
                config,
                policy_spec=spec,
                total_steps=total_steps * agents,
                seed=seed + p,
                device=device,
                batch_steps=sampler.rollout_length * len(policy_spec.rows_of(p, sampler.num_envs)),
            )
            self.counts[name] = PolicyCounts(
                RewardNormalizer(gamma=config.gamma, enabled=config.normalize_rewards is True)
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
        self.policy_config = config

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
            part = batch.columns(self.policy_spec.rows_of(p, columns), obs_width=learner.policy_spec.obs_dim)
            stats = self.policy_update(learner, self.counts[name], part)
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

    def policy_update(self, learner: PPOLearner, counts: PolicyCounts, part) -> dict:
        """One policy's PPO update on its agents' columns `part`, as PPO's own: its inputs (in
        `minibatches` minibatches an epoch, however many valid steps its agents hold), its
        learner's epochs, the update's end; its diagnostics."""
        config = self.policy_config
        counts.steps_seen += part.num_steps
        lr = learner.set_learning_rate(counts.steps_seen)
        rewards = learning_rewards(part, counts.reward_normalizer, clip=config.reward_clip, scale=config.reward_scale)
        inputs = ppo_inputs(
            learner,
            part,
            rewards,
            lr=lr,
            gamma=config.gamma,
            gae_lambda=config.gae_lambda,
            lagged=part.policy_version < counts.version,
            minibatch_size=max(int(part.valid.sum()) // config.minibatches, 1),
        )
        stats = learner.learn(inputs)
        explained = take_in_batch(learner.model, part, inputs["returns"])
        counts.version += 1
        return {**stats, "lr": lr, "explained_variance": explained, "policy_version": counts.version}

    def state_dict(self) -> dict:
        """A section per policy (its weights, optimiser, statistics and shuffles)."""
        return {
            "version": self.version,
            "policies": {
                name: {
                    **learner.state_dict(),
                    "version": self.counts[name].version,
                    "steps_seen": self.counts[name].steps_seen,
                    "reward_normalizer": self.counts[name].reward_normalizer.state_dict(),
                }
                for name, learner in self.learners.items()
            },
        }

    def load_state_dict(self, state: dict) -> None:
        missing = set(self.learners) ^ set(state["policies"])
        if missing:
            raise ValueError(
                f"the checkpoint's policies {sorted(state['policies'])} are not this run's "
                f"{sorted(self.learners)} (env.policies changed?)"
            )
        for name, learner in self.learners.items():
            section, counts = state["policies"][name], self.counts[name]
            learner.load_state_dict(section)
            counts.version, counts.steps_seen = int(section["version"]), int(section["steps_seen"])
            if "reward_normalizer" in section:  # absent from checkpoints written before it existed
                counts.reward_normalizer.load_state_dict(section["reward_normalizer"])
        self.version = int(state["version"])


class MAPPO(IPPO):
    """IPPO with a centralised critic: see the module docstring."""

    centralised_critic = True
