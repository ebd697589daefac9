"""What a learner's update asks of the learners it learns with: nothing when it learns alone
(`Alone`, here), every rank's share of each reduction in a data-parallel group
(rlpar.learners.peers wraps the same calls around a collective, as DDP wraps a module).

The learner (rlpar.learning.learner) calls these unconditionally; which object answers is the
build's choice (docs/learners.md). `BatchShape` stands in for a sampler where an algorithm that
learns itself is replicated on a rank that never samples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlpar.learning.losses.ppo_loss import normalize


class Alone:
    """One learner on the whole batch: every reduction is over its own samples only."""

    def learn(self, learner, inputs: dict) -> dict:
        """One update's gradient steps on `inputs` by `learner`, and their diagnostics."""
        return learner.learn(inputs)

    def receive(self, model: torch.nn.Module, optimizer, lr: float) -> None:
        """What a learner takes before its gradient steps from the one that made the inputs:
        alone, it made them (the model's statistics and the learning rate are already its own)."""

    def normalize(self, advantages: torch.Tensor) -> torch.Tensor:
        """Advantages normalised over the minibatch (all its rows, wherever they are)."""
        return normalize(advantages)

    def mean(self, values: torch.Tensor, *, samples: int) -> torch.Tensor:
        """Means over this learner's `samples` as means over every learner's samples."""
        return values

    def means_per_row(self, values: torch.Tensor, *, samples) -> torch.Tensor:
        """Row i of `values` (means over `samples[i]` samples) over every learner's samples of row i."""
        return values

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The sum over every learner."""
        return values

    def all_rows(self, values: torch.Tensor, *, rows: tuple[int, int], total: int) -> torch.Tensor:
        """`values` ([k, rows), this learner's columns `rows` of `total`) with every learner's
        columns in place: alone, its rows are all of them."""
        return values

    def minibatch_plan(self, size: int, minibatch_size: int) -> tuple[int, int]:
        """The minibatch size and the minibatches per pass over `size` samples (the remainder is
        left out)."""
        mb = min(minibatch_size, size)
        return mb, size // mb

    def draws_at_once(self, remaining: int | None) -> int | None:
        """How many replay minibatches to draw before learning them (`remaining`: the update's
        steps still owed; None: as many as the replay serves): alone, one, its priorities
        written back before the next is drawn."""
        return 1

    def metrics(self) -> dict:
        """What the learners add to an update's diagnostics."""
        return {}

    def state_dict(self) -> dict:
        """What checkpoints keep of the learners besides the algorithm's own state."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Takes back what `state_dict` kept (from the algorithm's checkpoint)."""

    def close(self) -> None:
        """Stops what the learners started (before the sampler, which may end their Ray instance)."""


ALONE = Alone()


@dataclass(frozen=True)
class BatchShape:
    """What an algorithm that never samples (one that learns itself, replicated on a rank of a
    learner group; a test's learner-only algorithm) is told of the batches it learns, in place
    of a sampler: their shape. It builds nothing that only sampling needs (`when_sampling`)."""

    rollout_length: int  # steps per environment in a rollout
    num_envs: int = 1  # environment columns in a batch
    worker_envs: int = 0  # environments in one worker's rollout (0: num_envs)

    @classmethod
    def of(cls, sampler: Any) -> BatchShape:
        return cls(rollout_length=sampler.rollout_length, num_envs=sampler.num_envs, worker_envs=sampler.worker_envs)

    def __post_init__(self) -> None:
        if not self.worker_envs:
            object.__setattr__(self, "worker_envs", self.num_envs)

    @property
    def num_rollout_workers(self) -> int:
        return self.num_envs // self.worker_envs

    def when_sampling(self, build) -> None:
        """Nothing: `build` (a replay, say) serves only a learner that samples."""

    def close(self) -> None:
        pass
