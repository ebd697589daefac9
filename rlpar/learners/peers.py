"""The data-parallel side of rlpar.learning.peers: one rank's answers to what a learner's
update asks of its peers, over the group's collective, so that N ranks learn what one learner
on the whole batch learns (docs/learners.md). The algorithm asks the same questions alone."""

from __future__ import annotations

import torch

from rlpar.learners.collective import Collective
from rlpar.learning.optimization.compiled import CompiledStep
from rlpar.learning.peers import Alone


class RankPeers(Alone):
    """One rank of a learner group: reductions over every rank, rank 0's statistics and rate."""

    collective: Collective | None = None  # the group's collective while joined

    def __init__(self, collective: Collective | None = None):
        self.collective = collective

    def in_group(self) -> Collective:
        assert self.collective is not None, "asked of a learner group that has not met"
        return self.collective

    def receive(self, model: torch.nn.Module, optimizer, lr: float) -> None:
        """Rank 0's buffers (observation statistics) and learning rate, before the gradient steps."""
        self.in_group().broadcast_module(model, parameters=False)
        optimizer.param_groups[0]["lr"] = lr

    def normalize(self, advantages: torch.Tensor) -> torch.Tensor:
        return self.in_group().normalize(advantages)

    def mean(self, values: torch.Tensor, *, samples: int) -> torch.Tensor:
        return self.in_group().mean(values, samples=samples)

    def means_per_row(self, values: torch.Tensor, *, samples) -> torch.Tensor:
        return self.in_group().means_per_row(values, samples=samples)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return self.in_group().sum(values)

    def all_rows(self, values: torch.Tensor, *, rows: tuple[int, int], total: int) -> torch.Tensor:
        """Each column from the one rank that holds it (`rows` of `total` are this rank's)."""
        start, stop = rows
        every_row = values.new_zeros((len(values), total))
        every_row[:, start:stop] = values
        return self.in_group().sum(every_row)

    def minibatch_plan(self, size: int, minibatch_size: int) -> tuple[int, int]:
        """Each rank takes its share of `minibatch_size` from its own columns, as many
        minibatches as the rank with the fewest samples can, so that all step together; a
        minibatch as large as the whole batch is each rank's whole shard."""
        collective = self.in_group()
        if minibatch_size >= int(collective.sum(torch.tensor([size]))[0]):
            return size, 1
        mb = max(minibatch_size // collective.world_size, 1)
        return mb, collective.smallest(size // mb)

    def draws_at_once(self, remaining: int | None) -> int | None:
        """All of an update's minibatches at once: rank 0 draws them, every rank learns its rows
        of each, rank 0 writes the priorities back."""
        return remaining


def learner_of(owner):
    """The learner that owns `owner`'s update: an algorithm's `learner`, or `owner` itself (a
    Learner, or an algorithm that learns itself)."""
    return getattr(owner, "learner", owner)


def join(owner, collective: Collective, peers: RankPeers) -> None:
    """The learner of `owner` (an algorithm or a Learner: `learner_of`) learns as one rank of a
    data-parallel group: from rank 0's weights, every gradient step's gradients averaged with the
    other ranks', its questions answered by `peers`. Steps are eager: a compiled step clips and
    applies inside its graph, where no all-reduce can come between."""
    learner = learner_of(owner)
    peers.collective = collective
    learner.peers = peers
    learner.step.collective = collective
    collective.broadcast_module(learner.model)
    if isinstance(getattr(learner, "gradient_step", None), CompiledStep):
        learner.gradient_step = learner.gradient_step.eager
    learner.compiled = False
    learner.on_joining_peers()


def leave(owner, peers: RankPeers) -> None:
    """The learner of `owner` stops averaging gradients; `peers` waits for the group's next meeting."""
    peers.collective = None
    learner_of(owner).step.collective = None
