"""Ape-X's replay (Horgan et al. 2018), for any learner that owns a replay (rlpar.algos.replay_learner):
a prioritised replay split over shards that the actors write to themselves and the learner
samples, each shard holding samples per insert with a rate limiter.

With parallel=distributed the actors (PrioritizingWorker) write their n-step transitions, with
the priorities their own copy gives them, straight into the replay shards (Ray actors named
`ReplayShard`, spread over the nodes); otherwise the transitions come back with the batch and
go into shards in this process. The learner takes minibatches from the shards in turn, the
following one already requested (prefetch), for as long as their rate limiters allow, and sends
the new priorities back.

Rate limiting: every shard holds sampled items per inserted transition at
`replay.samples_per_insert` (replay_ratio x batch_size unless set), like Reverb's
SampleToInsertRatio. The learner samples until every shard refuses, then waits for rollouts
(`replay_sample_wait_s`); an actor whose write a shard refuses tries again until it is taken,
which holds the actor back (`replay_insert_wait_s`, summed over the actors). Neither can wait
for the other forever (rlpar.replay.rate_limiter).

Exploration: each environment keeps its own rate for the whole run (`self.exploration`, a
rlpar.learning.exploration.SpreadExploration the algorithm sets before the learner's
__init__); the run's episode statistics count the greedier half, and
`episode_return_mean_all` every environment.

A shard that dies is started again, empty, counted in `replay_shard_restarts`; training goes on
with the others, and the actors get the new handle with the next weights.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from rlpar.replay.nstep import most_transitions_per_rollout
from rlpar.replay.rate_limiter import least_tolerance
from rlpar.replay.shard import ReplayShard
from rlpar.sampling.prioritizing_worker import MAX_WRITES_IN_FLIGHT, PrioritizingWorker


class ShardedReplay:
    """Mixed in before a ReplayLearner subclass: `class ApeX(ShardedReplay, DQN)`."""

    sync_mode = "non_blocking"
    max_policy_lag: int | None = None
    worker_class: type = PrioritizingWorker
    central_inference = False
    worker_duties = "prioritise their own replay with their own exploration rate"
    replay_in_checkpoints = False  # the shards are refilled by a resumed run
    recurrent_policies = False  # its actors write transitions, not R2D2's sequences

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        return {
            "n_step": algo_config["n_step"],
            "gamma": algo_config["gamma"],
            "reward_clip": algo_config.get("reward_clip"),
            "reward_scale": algo_config.get("reward_scale", 1.0),
        }

    # -- the sharded replay -----------------------------------------------------------------
    def build_replay(self) -> None:
        """Shards where the sampler puts them (rlpar.sampling.services): Ray actors spread over
        the nodes, or tables in this process."""
        self.num_shards = self.replay_settings.num_shards
        self.rate_limiter = self.rate_limiter_settings()
        self.prefetched: dict[int, object] = {}  # shard -> its next minibatch, already requested
        self.shards = [
            self.sampler.start_service(
                ReplayShard,
                name=f"replay shard {index} of {self.num_shards}",
                node_index=index,
                settings=self.shard_settings(index),
                on_lost=functools.partial(self.shard_lost, index),
            )
            for index in range(self.num_shards)
        ]
        self.turn = 0
        self.last_beta = self.replay_settings.beta_start  # the importance exponent of the latest minibatch
        self.sample_wait_s = 0.0
        self.insert_wait_s = 0.0  # actors' time waiting for their writes to be taken, as they report it

    def rate_limiter_settings(self) -> dict:
        """Every shard's RateLimiter: `replay.samples_per_insert` (default replay_ratio x
        batch_size: the DQN learner's ratio) within `replay.rate_tolerance` sampled items, from
        learning_starts / num_shards items (at least a minibatch) on. The default tolerance is
        the least that cannot deadlock plus room for the writes all actors may have unanswered
        at once: with only the least, actors wait for the learner more often (docs/benchmarks.md,
        "Figures behind design choices")."""
        replay = self.replay_settings
        samples_per_insert = replay.samples_per_insert or self.replay_ratio * self.batch_size
        insert_batch = most_transitions_per_rollout(
            num_envs=self.sampler.worker_envs, rollout_length=self.sampler.rollout_length, n=self.n_step
        )
        least = least_tolerance(
            samples_per_insert=samples_per_insert, insert_batch=insert_batch, sample_batch=self.batch_size
        )
        writes_per_shard = -(
            -self.sampler.num_rollout_workers * (MAX_WRITES_IN_FLIGHT + 1) // self.num_shards
        )  # unanswered at once
        tolerance = replay.rate_tolerance or least + samples_per_insert * insert_batch * writes_per_shard
        return dict(
            min_size=max(-(-self.learning_starts // self.num_shards), self.batch_size),
            samples_per_insert=samples_per_insert,
            tolerance=tolerance,
            insert_batch=insert_batch,
            sample_batch=self.batch_size,
        )

    def shard_settings(self, index: int) -> dict:
        replay = self.replay_settings
        return dict(
            capacity=replay.capacity // self.num_shards,
            obs_dim=self.policy_spec.obs_dim,
            obs_dtype=self.policy_spec.obs_dtype,
            action_size=self.replay_action_size(),
            alpha=replay.alpha if replay.prioritized else 0.0,
            beta_start=replay.beta_start,
            beta_end=replay.beta_end,
            beta_steps=max(self.beta_steps // self.num_shards, 1),
            seed=self.seed + 1000 * index,
            rate_limiter=self.rate_limiter,
            frame_stack=replay.frame_stack(self.policy_spec),
            frames_per_transition=replay.frames_per_transition,
        )

    def shard_lost(self, index: int, kept: None) -> None:
        """A shard that died starts again empty; actors receive its new address with the next
        weights."""
        self.prefetched.pop(index, None)
        self.version += 1
        return None

    def get_weights(self) -> dict:
        """With the shards' addresses: actors that can wait for a shard write to it themselves."""
        return {**super().get_weights(), "replay_shards": [shard.address for shard in self.shards]}

    def insert(self, batch) -> int:
        """Transitions that came back with the batch go into the in-process shards, in turn (one
        whose limiter refuses them gets sampled first: learning until every limiter refuses
        leaves room for an insert in each); those the actors wrote are only counted."""
        count = sum(batch.extras.get("written", []))
        self.insert_wait_s += sum(batch.extras.get("insert_wait_s", []))
        for transitions, priorities in zip(batch.extras.get("transitions", []), batch.extras.get("priorities", [])):
            shard = self.shards[self.turn % self.num_shards]
            self.turn += 1
            added = shard.call("add", transitions, priorities)
            if added is None:
                self.learn_from_replay(None)
                added = shard.call("add", transitions, priorities)
            count += added
        self.inserted += count
        return count

    def gradient_steps_owed(self, env_steps: int) -> None:
        """As many as the shards' rate limiters allow (None): they hold samples per insert."""
        return None

    def sample(self, *, min_rollouts: int = 1):
        """Learning stops only when no shard's limiter allows another minibatch, so the time spent
        collecting rollouts is the learner's wait for inserts (`replay_sample_wait_s`)."""
        began = time.perf_counter()
        batch, metrics = super().sample(min_rollouts=min_rollouts)
        self.sample_wait_s += time.perf_counter() - began
        return batch, metrics

    def next_minibatch(self):
        """From the next shard whose limiter allows one; a shard that served a minibatch is asked
        for its following one at once (prefetch: an actor's answers while the learner learns)."""
        for _ in range(self.num_shards):
            index = self.turn % self.num_shards
            self.turn += 1
            drawn = self.fetch(index)
            if drawn is not None:
                items, weights, transitions, self.last_beta = drawn
                return (index, items), weights, transitions
        return None

    def fetch(self, index: int):
        shard = self.shards[index]
        drawn = shard.answer(self.prefetched.pop(index, None) or shard.request("sample", self.batch_size))
        if drawn is not None:  # a refusal is not prefetched: it would be stale by the next iteration
            self.prefetched[index] = shard.request("sample", self.batch_size)
        return drawn

    def report_priorities(self, where, td_errors) -> None:
        if self.replay_settings.prioritized:  # else every item keeps priority 1: uniform
            index, items = where
            self.shards[index].tell("update_priorities", items, td_errors)  # not waited for

    def replay_metrics(self) -> dict:
        """Sizes, and the time actors waited for their writes to be taken and the learner waited
        for inserts (both cumulative, seconds)."""
        requests = [shard.request("stats") for shard in self.shards]  # asked all at once, answered in turn
        stats = [s for s in (shard.answer(r) for shard, r in zip(self.shards, requests)) if s is not None]
        return {
            "replay_size": sum(s["size"] for s in stats),
            "replay_insert_wait_s": self.insert_wait_s,
            "replay_sample_wait_s": self.sample_wait_s,
            "samples_per_insert_target": self.rate_limiter["samples_per_insert"],
        }

    def beta(self) -> float:
        return self.last_beta

    def training_step(self):
        result = super().training_step()
        result.metrics.update(
            replay_shards=self.num_shards,
            replay_shard_restarts=sum(shard.restarts for shard in self.shards),
            episode_return_mean_all=self.all_returns_mean,
        )
        return result

    def reported_episodes(self, batch) -> tuple[list, list]:
        """The greedier half of the environments' episodes (see the module's docstring)."""
        self.all_returns_mean = float(np.mean(batch.episode_returns)) if batch.episode_returns else None
        return self.exploration.greedier_episodes(batch)

    def replay_state(self) -> None:
        """The shards' contents are not checkpointed: a resumed run refills them."""
        return None
