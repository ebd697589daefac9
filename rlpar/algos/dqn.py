"""DQN (Mnih et al. 2015) with the Rainbow-era fixes that matter on small tasks: double-Q targets,
an optional dueling head, n-step returns and proportional prioritised replay.

One iteration: act ε-greedily with the newest published weights -> the rollout's n-step
transitions (followed per global environment id, so rollouts may arrive from any worker) go into
the replay, which the learner owns -> once `learning_starts` transitions are in, `replay_ratio`
gradient steps per env step on minibatches from the replay (Huber loss on the TD error, weighted
by importance weights when prioritised), the target network refreshed by a hard copy every
`target_update_every` gradient steps (or by Polyak averaging with `tau` < 1) -> weights published
to the workers every `weight_sync_interval` updates, with the current ε.
Runs on every sampler; workers act with a numpy copy of the Q-network.

With a recurrent Q-network (`model.recurrent`), R2D2's sequence replay (Kapturowski et al. 2019):
the replay keeps overlapping sequences of `burn_in + sequence_length` steps with the state that
entered their first step (rlpar.replay.sequences); the learner unrolls the burn-in from that
state without training on it, learns on the rest, and prioritises each sequence by a mix of the
max and mean of its TD errors (rlpar.learning.r2d2). `replay.capacity` and `learning_starts`
still count env steps: a sequence brings `sequence_length // 2` new ones.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from rlpar.algos.base import Algorithm, StepResult
from rlpar.learning.compiled import compile_setting, gradient_step
from rlpar.learning.optim import LeanAdam
from rlpar.learning.q_targets import q_targets, weighted_huber
from rlpar.learning.r2d2 import sequence_q_loss
from rlpar.learning.step import LearningRate, linear_schedule
from rlpar.replay.nstep import NStepWriter
from rlpar.replay.samplers import PrioritizedSampler, UniformSampler
from rlpar.replay.sequences import SequenceWriter, sequence_fields
from rlpar.replay.settings import ReplaySettings
from rlpar.replay.shard import transition_fields
from rlpar.replay.storage import RingStorage


class DQN(Algorithm):
    model_kind = "q_network"
    data_parallel = True
    recurrent_policies = True

    def __init__(
        self,
        *,
        sampler,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        lr: float = 1e-4,
        anneal_lr: bool = False,
        min_lr_fraction: float = 0.0,
        gamma: float = 0.99,
        n_step: int = 1,
        batch_size: int = 64,
        replay_ratio: float = 0.25,
        learning_starts: int = 1000,
        target_update_every: int = 250,
        tau: float = 1.0,
        double_q: bool = True,
        epsilon_start: float = 1.0,
        epsilon_end: float = 0.05,
        exploration_steps: int = 10_000,
        weight_sync_interval: int = 1,
        max_grad_norm: float = 10.0,
        replay: ReplaySettings | None = None,
        reward_scale: float = 1.0,
        reward_clip: float | None = None,
        max_consecutive_nonfinite: int = 20,
        compile: str | bool = "auto",
        precision: str = "fp32",
        burn_in: int = 8,
        sequence_length: int = 16,
    ):
        """`compile`: the whole minibatch step with torch.compile (rlpar.learning.compiled);
        `burn_in`, `sequence_length`: a recurrent Q-network's replayed sequences (else unused)."""
        super().__init__(sampler=sampler, policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device,
                         gamma=gamma, reward_scale=reward_scale, reward_clip=reward_clip)
        self.set_optimizer(LeanAdam(self.parameters, lr=lr, eps=1e-5), max_grad_norm=max_grad_norm,
                           max_consecutive_nonfinite=max_consecutive_nonfinite, precision=precision)
        self.lr = LearningRate(lr, anneal_lr, min_lr_fraction)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.gamma, self.batch_size, self.replay_ratio = gamma, batch_size, replay_ratio
        self.learning_starts, self.target_update_every, self.tau = learning_starts, target_update_every, tau
        self.double_q = double_q
        self.epsilon_start, self.epsilon_end, self.exploration_steps = epsilon_start, epsilon_end, exploration_steps
        self.weight_sync_interval = weight_sync_interval
        self.replay_settings = replay or ReplaySettings()
        # beta reaches beta_end when the run ends: one sample() call per gradient step
        self.beta_steps = max(int(replay_ratio * max(total_steps - learning_starts, 1)), 1)
        self.n_step, self.seed = n_step, seed
        self.recurrent = self.model.recurrent
        self.burn_in, self.sequence_length = burn_in, sequence_length
        # env steps each replayed item brings: a transition 1, a sequence its period
        self.steps_per_item = sequence_length // 2 if self.recurrent else 1
        if sampler is not None:  # a learner group's other ranks (no sampler) learn rows that rank 0 draws
            self.build_replay()
        self.update_credit = 0.0  # gradient steps owed by the replay ratio
        self.gradient_steps = 0
        self.updates = 0  # iterations that learned
        self.inserted = self.sampled = 0
        self.learned: list = []  # (loss, |TD error|, Q) of each gradient step since learning_stats
        self.compiled = compile_setting(compile, expected_gradient_steps=int(replay_ratio * total_steps),
                                        precision=precision, recurrent=self.recurrent)
        loss = self.sequence_loss if self.recurrent else self.minibatch_loss
        self.gradient_step = gradient_step(loss, model=self.model, guard=self.step, compiled=self.compiled)

    def build_replay(self) -> None:
        """The learner's replay: ring storage, uniform or prioritised sampling, an n-step writer
        (a sequence writer for a recurrent Q-network)."""
        replay, spec = self.replay_settings, self.policy_spec
        capacity = max(replay.capacity // self.steps_per_item, 1)
        if self.recurrent:
            fields = sequence_fields(obs_dim=spec.obs_dim, obs_dtype=spec.obs_dtype, state_size=spec.state_size,
                                     burn_in=self.burn_in, length=self.sequence_length)
            self.writer = SequenceWriter(burn_in=self.burn_in, length=self.sequence_length)
        else:
            fields = transition_fields(spec.obs_dim, spec.obs_dtype)
            self.writer = NStepWriter(n=self.n_step, gamma=self.gamma)
        self.storage = RingStorage(capacity=capacity, fields=fields)
        if replay.prioritized:
            self.replay = PrioritizedSampler(capacity=capacity, alpha=replay.alpha, beta_start=replay.beta_start,
                                             beta_end=replay.beta_end, beta_steps=self.beta_steps, seed=self.seed)
        else:
            self.replay = UniformSampler(seed=self.seed)

    # -- acting -----------------------------------------------------------------------------
    def epsilon(self) -> float:
        return linear_schedule(self.epsilon_start - self.epsilon_end, steps_seen=self.steps_seen,
                               total_steps=self.exploration_steps, min_fraction=0.0) + self.epsilon_end

    def get_weights(self) -> dict:
        return {**super().get_weights(), "epsilon": np.float64(self.epsilon())}

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
        metrics.update(stats, time_learn_s=end - start, epsilon=self.epsilon(), **self.replay_metrics(),
                       replay_inserts=self.inserted, replay_samples=self.sampled,
                       samples_per_insert=self.sampled / max(self.inserted, 1), policy_version=self.version,
                       inserts_per_s=inserted / step_s, samples_per_s=stats["gradient_steps"] * self.batch_size / step_s)
        if self.replay_settings.prioritized:
            metrics["beta"] = self.beta()
        return StepResult(batch.num_steps, *self.reported_episodes(batch), metrics)

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
        return self.replay.beta

    def insert(self, batch) -> int:
        """The rollout's finished n-step transitions (or sequences) into the replay; returns how many."""
        recurrent = {"states": batch.states} if self.recurrent else {}
        transitions = self.writer.add(obs=batch.obs, actions=batch.actions, rewards=self.learning_rewards(batch),
                                      terminated=batch.terminated, truncated=batch.truncated, valid=batch.valid,
                                      env_ids=batch.env_ids, last_obs=batch.last_obs, **recurrent)
        count = len(transitions["actions"])
        if count:
            indices = self.storage.add({name: transitions[name] for name in self.storage.fields})
            self.replay.on_insert(indices)  # uniform sampling: a no-op
        self.inserted += count
        return count

    def learn_from_replay(self, steps: int | None) -> None:
        """`steps` gradient steps, or (None) as many as the replay serves; their losses are kept
        for `learning_stats`. Alone, one minibatch at a time: drawn, learned, its priorities
        written back before the next is drawn. In a learner group, all of them at once: rank 0
        draws them, every rank learns its rows of each, rank 0 writes the priorities back."""
        lr = self.lr.apply(self.optimizer, steps_seen=self.steps_seen, total_steps=self.total_steps)
        done = 0
        while steps is None or done < steps:
            most = 1 if self.learner_group is None else None if steps is None else steps - done
            wheres, inputs = self.learning_inputs(lr=lr, most=most)
            if not wheres:  # nothing (more) to replay now
                break
            learned = self.learn_on_every_rank(inputs)
            for where, td_errors in zip(wheres, learned["td_errors"]):
                self.report_priorities(where, td_errors)
            self.learned.extend(learned["losses"].unbind(0))
            done += len(wheres)
            self.sampled += self.batch_size * len(wheres)
        self.gradient_step.settle()
        if done:
            self.updates += 1
            if self.updates % self.weight_sync_interval == 0:
                self.version += 1  # workers pick the new weights up with their next request

    def learning_inputs(self, *, lr: float, most: int | None) -> tuple[list, dict]:
        """Up to `most` minibatches from the replay (None: as many as it serves) with their
        importance weights and the learning rate, and where each came from (for its
        priorities): rank 0's part of an update, as it owns the replay."""
        wheres, minibatches, weights = [], [], []
        while most is None or len(wheres) < most:
            drawn = self.next_minibatch()
            if drawn is None:
                break
            wheres.append(drawn[0])
            weights.append(drawn[1])
            minibatches.append(drawn[2])
        return wheres, {"minibatches": minibatches, "weights": weights, "lr": lr, "rows": (0, self.batch_size)}

    def shard_inputs(self, inputs: dict, world_size: int) -> list[dict]:
        """Each rank's rows of every minibatch: contiguous, so that rank 0 can put every rank's
        TD errors back in place (`learn`)."""
        from rlpar.learners.shard import row_ranges

        return [{**inputs, "rows": (start, stop),
                 "minibatches": [{k: v[start:stop] for k, v in m.items()} for m in inputs["minibatches"]],
                 "weights": [w[start:stop] for w in inputs["weights"]]}
                for start, stop in row_ranges(self.batch_size, world_size)]

    def learn(self, inputs: dict) -> dict:
        """The gradient steps on `inputs`' minibatches (whole, or in a learner group this rank's
        rows of each), the target network refreshed as each step makes it due: the |TD errors|
        of every row (every rank's, in a group) and each step's (loss, mean |TD error|, mean Q).
        Non-finite steps of a compiled step are counted by `learn_from_replay`'s settle."""
        self.receive_from_rank0(inputs)
        td_errors, losses = [], []
        for transitions, weights in zip(inputs["minibatches"], inputs["weights"]):
            data = {k: _tensor(v, self.device) for k, v in transitions.items()}
            loss, td, q_taken = self.gradient_step(**data, weights=_tensor(weights, self.device))
            td_errors.append(td.abs())
            losses.append(torch.stack([loss, td_errors[-1].mean(), q_taken.mean()]))
            self.gradient_steps += 1
            self.refresh_target()
        td_errors, losses = torch.stack(td_errors), torch.stack(losses)
        if self.collective is not None:
            start, stop = inputs["rows"]
            losses = self.collective.mean(losses, samples=stop - start)
            every_row = td_errors.new_zeros((len(td_errors), self.batch_size))
            every_row[:, start:stop] = td_errors
            td_errors = self.collective.sum(every_row)  # each row from the one rank that holds it
        return {"td_errors": td_errors.cpu().numpy(), "losses": losses}

    def learning_stats(self) -> dict:
        """Means over the gradient steps since the last call."""
        stats = {"lr": self.optimizer.param_groups[0]["lr"], "gradient_steps": len(self.learned)}
        if self.learned:
            loss, td_error, q_mean = torch.stack(self.learned).mean(0).tolist()
            stats.update(loss_q=loss, td_error_mean=td_error, q_mean=q_mean,
                         **self.step.metrics())
            self.learned = []
        if self.learner_group is not None:
            stats["learner_restarts"] = self.learner_group.restarts
        return stats

    def next_minibatch(self):
        """(where it came from, importance weights, transitions), or None."""
        slots, weights = self.replay.sample(batch_size=self.batch_size, size=self.storage.size)
        return slots, weights, self.storage.get(slots)

    def report_priorities(self, slots, td_errors) -> None:
        self.replay.update_priorities(slots, td_errors)  # uniform sampling: a no-op

    def minibatch_loss(self, obs, actions, rewards, next_obs, discounts, weights):
        """The loss of one minibatch, its TD errors and Q-values (what algo.compile compiles)."""
        with torch.no_grad():
            next_online = self.model(next_obs) if self.double_q else None
            targets = q_targets(rewards, discounts, self.target_model(next_obs), next_online)
        q_taken = self.model(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        td_errors = targets - q_taken
        return weighted_huber(td_errors, weights), td_errors, q_taken

    def sequence_loss(self, weights, **sequences):
        """A minibatch of sequences: the loss, each sequence's priority (in place of a TD error)
        and the Q-values of the trained steps."""
        return sequence_q_loss(model=self.model, target_model=self.target_model, **sequences, weights=weights,
                               burn_in=self.burn_in, n=self.n_step, gamma=self.gamma, double_q=self.double_q)

    def refresh_target(self) -> None:
        if self.tau < 1.0:
            with torch.no_grad():
                for target, online in zip(self.target_model.parameters(), self.parameters):
                    target.lerp_(online, self.tau)
        elif self.gradient_steps % self.target_update_every == 0:
            self.target_model.load_state_dict(self.model.state_dict())

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """With `replay.checkpoint`, the replay's contents too (a resumed local run then
        continues exactly); without, a resumed run refills it from scratch."""
        state = {**super().state_dict(), "target_model": self.target_model.state_dict(),
                 "counters": {"update_credit": self.update_credit, "gradient_steps": self.gradient_steps,
                              "updates": self.updates, "inserted": self.inserted, "sampled": self.sampled}}
        replay = self.replay_state()
        if replay is not None:
            state["replay"] = replay
        return state

    def replay_state(self) -> dict | None:
        if not self.replay_settings.checkpoint:
            return None
        return {"storage": self.storage.state_dict(), "sampler": self.replay.state_dict(),
                "writer": self.writer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.target_model.load_state_dict(state["target_model"])
        counters = state["counters"]
        self.update_credit = float(counters["update_credit"])
        self.gradient_steps, self.updates = int(counters["gradient_steps"]), int(counters["updates"])
        self.inserted, self.sampled = int(counters["inserted"]), int(counters["sampled"])
        if "replay" in state and self.sampler is not None:  # a group's other ranks keep no replay
            self.storage.load_state_dict(state["replay"]["storage"])
            self.replay.load_state_dict(state["replay"]["sampler"])
            self.writer.load_state_dict(state["replay"]["writer"])


def _tensor(array: np.ndarray, device) -> torch.Tensor:
    """A tensor of `array` (arrays from a Ray shard are read-only views of the object store: copied)."""
    return torch.as_tensor(array if array.flags.writeable else array.copy(), device=device)
