"""What every learner that owns a replay shares (DQN, SAC, TD3): the rollout's n-step transitions
go into the replay, and once `learning_starts` env steps are in, `replay_ratio` gradient steps
per env step on minibatches drawn from it.

The replay follows each global environment id, so rollouts may arrive from any worker in any
order. A subclass's learner says how a minibatch is learned (its `learn`: the gradient steps,
their |TD errors| and the diagnostics the algorithm names in `loss_names`); the algorithm may
replace the replay's parts
(`build_replay`) or, with rlpar.algos.sharded_replay, keep it in shards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from rlpar.algos.base import Algorithm, LearnerConfig, StepResult
from rlpar.learning.learner import Learner
from rlpar.replay.frames import replay_storage
from rlpar.replay.nstep import NStepWriter
from rlpar.replay.samplers import PrioritizedSampler, UniformSampler
from rlpar.replay.settings import ReplaySettings
from rlpar.replay.shard import transition_fields
from rlpar.typed_config import integer, number, override


@dataclass(frozen=True, kw_only=True)
class ReplayLearnerConfig(LearnerConfig):
    """What a learner with its own replay takes (DQN, SAC, TD3 and their Ape-X forms), besides
    every learner's; `replay` is the `algo.replay` node (its own typed config)."""

    n_step: int = integer(1, low=1)  # n-step returns written to the replay
    batch_size: int = integer(64, low=1)
    replay_ratio: float = number(0.25, low=0, low_open=True)  # gradient steps per env step
    learning_starts: int = integer(1000, low=0)  # env steps in the replay before the first gradient step
    weight_sync_interval: int = integer(1, low=1)  # updates between weight pushes to the workers
    replay: ReplaySettings | None = None
    # replay keeps raw rewards; whitening them by a running return is not offered
    normalize_rewards: bool | str = override(LearnerConfig, "normalize_rewards", False, fixed=True)


class ReplayLearner(Algorithm):
    loss_names: tuple[str, ...] = ()  # what each gradient step's diagnostics (`learn`'s "losses") are, as logged

    def __init__(
        self,
        config: ReplayLearnerConfig,
        *,
        sampler,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        steps_per_item: int = 1,
        learner: Learner | None = None,
    ):
        """`steps_per_item`: env steps each replayed item brings (a transition 1, a recurrent
        Q-network's sequence its period); `capacity` and `learning_starts` count env steps.
        `learner`: what owns the gradient steps and counts them (its `gradient_steps`); None: one
        of `learner_class` (Algorithm.__init__)."""
        super().__init__(
            config,
            sampler=sampler,
            policy_spec=policy_spec,
            total_steps=total_steps,
            seed=seed,
            device=device,
            learner=learner,
        )
        self.gamma, self.n_step, self.batch_size, self.replay_ratio = (
            config.gamma,
            config.n_step,
            config.batch_size,
            config.replay_ratio,
        )
        self.learning_starts, self.weight_sync_interval = config.learning_starts, config.weight_sync_interval
        self.replay_settings = config.replay or ReplaySettings()
        # beta reaches beta_end when the run ends: one sample() call per gradient step
        self.beta_steps = max(int(config.replay_ratio * max(total_steps - config.learning_starts, 1)), 1)
        self.seed, self.steps_per_item = seed, steps_per_item
        # only where batches are sampled: a learner that learns rows drawn elsewhere keeps no replay
        self.sampler.when_sampling(self.build_replay)
        self.update_credit = 0.0  # gradient steps owed by the replay ratio
        self.updates = 0  # iterations that learned
        self.inserted = self.sampled = 0
        self.learned: list = []  # each gradient step's diagnostics (loss_names) since learning_stats

    def build_replay(self) -> None:
        """The learner's replay: ring storage, uniform or prioritised sampling, an n-step writer."""
        fields = transition_fields(self.policy_spec.obs_dim, self.policy_spec.obs_dtype, self.replay_action_size())
        self.use_replay(
            fields,
            NStepWriter(n=self.n_step, gamma=self.gamma),
            frame_stack=self.replay_settings.frame_stack(self.policy_spec),
        )

    def replay_action_size(self) -> int:
        """0: actions are indices; else the dimensions of a Box action (transition_fields)."""
        action = self.policy_spec.action
        return 0 if action.discrete else action.size

    def use_replay(self, fields: dict, writer, frame_stack: int = 0) -> None:
        """`frame_stack` > 0: observations are stacks of that many frames, each stored once
        (rlpar.replay.frames)."""
        replay = self.replay_settings
        capacity = max(replay.capacity // self.steps_per_item, 1)
        self.writer = writer
        self.storage = replay_storage(
            capacity=capacity, fields=fields, stack=frame_stack, frames_per_transition=replay.frames_per_transition
        )
        self.replay: PrioritizedSampler | UniformSampler
        if replay.prioritized:
            self.replay = PrioritizedSampler(
                capacity=capacity,
                alpha=replay.alpha,
                beta_start=replay.beta_start,
                beta_end=replay.beta_end,
                beta_steps=self.beta_steps,
                seed=self.seed,
            )
        else:
            self.replay = UniformSampler(seed=self.seed)

    # -- one iteration ----------------------------------------------------------------------
    def training_step(self) -> StepResult:
        began = time.perf_counter()
        batch, metrics = self.sample()
        start = time.perf_counter()
        self.steps_seen += batch.num_steps
        inserted = self.insert(batch)
        self.learn_from_replay(self.gradient_steps_owed(batch.num_steps))
        stats = self.learning_stats()
        end = time.perf_counter()
        step_s = max(end - began, 1e-9)  # rates over the whole iteration, sampling included
        metrics.update(
            stats,
            time_learn_s=end - start,
            **self.exploration_metrics(),
            **self.replay_metrics(),
            replay_inserts=self.inserted,
            replay_samples=self.sampled,
            samples_per_insert=self.sampled / max(self.inserted, 1),
            policy_version=self.version,
            inserts_per_s=inserted / step_s,
            samples_per_s=stats["gradient_steps"] * self.batch_size / step_s,
        )
        if self.replay_settings.prioritized:
            metrics["beta"] = self.beta()
        return StepResult(batch.num_steps, *self.reported_episodes(batch), metrics)

    def exploration_metrics(self) -> dict:
        """How the workers explore now (DQN: ε), logged with every iteration."""
        return {}

    def gradient_steps_owed(self, env_steps: int) -> int | None:
        """`replay_ratio` per env step once `learning_starts` env steps are in the replay (the
        fraction carries over)."""
        if self.inserted * self.steps_per_item >= self.learning_starts:
            self.update_credit += self.replay_ratio * env_steps
        steps = int(self.update_credit)
        self.update_credit -= steps
        return steps

    def reported_episodes(self, batch) -> tuple[list, list]:
        """Returns and lengths of the episodes the run's statistics count: all of them."""
        return batch.episode_returns, batch.episode_lengths

    def replay_metrics(self) -> dict:
        return {"replay_size": self.storage.size}

    def beta(self) -> float:
        assert isinstance(self.replay, PrioritizedSampler)  # asked with a prioritised replay only
        return self.replay.beta

    def insert(self, batch) -> int:
        """The rollout's finished n-step transitions into the replay; returns how many."""
        items = self.writer.add(
            obs=batch.obs,
            actions=batch.actions,
            rewards=self.learning_rewards(batch),
            terminated=batch.terminated,
            truncated=batch.truncated,
            valid=batch.valid,
            env_ids=batch.env_ids,
            last_obs=batch.last_obs,
            **self.writer_extras(batch),
        )
        count = len(items["actions"])
        if count:
            indices = self.storage.add({name: items[name] for name in self.storage.fields})
            self.replay.on_insert(indices)  # uniform sampling: a no-op
            self.replay.forget(self.storage.take_lost())  # items whose frames were overwritten (rlpar.replay.frames)
        self.inserted += count
        return count

    def writer_extras(self, batch) -> dict:
        """What the writer takes besides the transitions (a sequence writer: the recurrent states)."""
        return {}

    def learn_from_replay(self, steps: int | None) -> None:
        """`steps` gradient steps, or (None) as many as the replay serves; their diagnostics are
        kept for `learning_stats`, drawn as many at a time as the learners take
        (`self.peers.draws_at_once`): alone one, its priorities written back before the next is
        drawn; a learner group all of them, each learner learning its rows of each."""
        lr = self.learner.set_learning_rate(self.steps_seen)
        done = 0
        while steps is None or done < steps:
            most = self.peers.draws_at_once(None if steps is None else steps - done)
            wheres, inputs = self.learning_inputs(lr=lr, most=most)
            if not wheres:  # nothing (more) to replay now
                break
            learned = self.peers.learn(self.learner, inputs)
            for where, td_errors in zip(wheres, learned["td_errors"]):
                self.report_priorities(where, td_errors)
            self.learned.extend(learned["losses"].unbind(0))
            done += len(wheres)
            self.sampled += self.batch_size * len(wheres)
        self.learner.settle_steps()
        if done:
            self.updates += 1
            if self.updates % self.weight_sync_interval == 0:
                self.version += 1  # workers pick the new weights up with their next request

    # Not the on-policy template's learning_inputs(batch) (Algorithm.update): a replay learner's
    # update (learn_from_replay) draws its inputs from the replay.
    def learning_inputs(self, *, lr: float, most: int | None) -> tuple[list, dict]:  # type: ignore[override]
        """Up to `most` minibatches from the replay (None: as many as it serves) with their
        importance weights and the learning rate, and where each came from (for its
        priorities): the sampling learner's part of an update, as it owns the replay."""
        wheres: list = []
        minibatches: list = []
        weights: list = []
        while most is None or len(wheres) < most:
            drawn = self.next_minibatch()
            if drawn is None:
                break
            wheres.append(drawn[0])
            weights.append(drawn[1])
            minibatches.append(drawn[2])
        return wheres, {"minibatches": minibatches, "weights": weights, "lr": lr, "rows": (0, self.batch_size)}

    def learning_stats(self) -> dict:
        """Means over the gradient steps since the last call."""
        stats = {"lr": self.learner.optimizer.param_groups[0]["lr"], "gradient_steps": len(self.learned)}
        if self.learned:
            stats.update(
                zip(self.loss_names, torch.stack(self.learned).mean(0).tolist()), **self.learner.step.metrics()
            )
            self.learned = []
        stats.update(self.peers.metrics())
        return stats

    def next_minibatch(self):
        """(where it came from, importance weights, transitions), or None."""
        slots, weights = self.replay.sample(batch_size=self.batch_size, size=self.storage.size)
        return slots, weights, self.storage.get(slots)

    def report_priorities(self, slots, td_errors) -> None:
        kept = self.storage.intact(slots)  # a lost item stays forgotten
        self.replay.update_priorities(slots[kept], np.asarray(td_errors)[kept])  # uniform sampling: a no-op

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """With `replay.checkpoint`, the replay's contents too (a resumed local run then
        continues exactly); without, a resumed run refills it from scratch."""
        state = {
            **super().state_dict(),
            "counters": {
                "update_credit": self.update_credit,
                "gradient_steps": self.learner.gradient_steps,
                "updates": self.updates,
                "inserted": self.inserted,
                "sampled": self.sampled,
            },
        }
        replay = self.replay_state()
        if replay is not None:
            state["replay"] = replay
        return state

    def replay_state(self) -> dict | None:
        if not self.replay_settings.checkpoint:
            return None
        return {
            "storage": self.storage.state_dict(),
            "sampler": self.replay.state_dict(),
            "writer": self.writer.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        counters = state["counters"]
        self.update_credit = float(counters["update_credit"])
        self.learner.gradient_steps, self.updates = int(counters["gradient_steps"]), int(counters["updates"])
        self.inserted, self.sampled = int(counters["inserted"]), int(counters["sampled"])
        if "replay" in state:  # kept with `replay.checkpoint`
            self.storage.load_state_dict(state["replay"]["storage"])
            self.replay.load_state_dict(state["replay"]["sampler"])
            self.writer.load_state_dict(state["replay"]["writer"])


def as_tensor(array: np.ndarray, device) -> torch.Tensor:
    """A tensor of `array` (arrays from a Ray shard are read-only views of the object store: copied)."""
    return torch.as_tensor(array if array.flags.writeable else array.copy(), device=device)
