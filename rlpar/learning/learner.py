"""What owns an update (as RLlib's new stack splits it): a Learner holds the model, its
optimiser and guarded step, the learning rate, and takes the gradient steps of one update on
inputs that its algorithm prepared from a batch (`learn`). The algorithm (rlpar.algos) decides
what to sample, when to update and which weights go out; a learner group
(rlpar.learners) wraps any Learner, as DDP wraps a module."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlpar.learning.estimators.sequences import minibatches, pieces_per_minibatch, step_tensors
from rlpar.learning.optimization.optim import load_optimizer_state, optimizer_state
from rlpar.learning.optimization.step import GuardedStep, LearningRate
from rlpar.learning.peers import ALONE, Alone


class Learner(ABC):
    """A model of `policy_spec` (built after seeding torch with `seed`, so that every learner
    built alike starts from the same weights), its optimiser (`set_optimizer`) and its update."""

    # how `learn`'s inputs may be cut between learners (rlpar.learners.shard.shard_inputs): whole
    # environment `columns` of time-major [T, E] arrays; PPO's `columns+minibatches`; replay `rows`
    input_layout = "columns"
    # what an update asks of the learners it learns with: ALONE, or its rank's answers in a
    # learner group (rlpar.learners.peers.join)
    peers: Alone = ALONE
    compiled = False  # its gradient steps run compiled graphs (algo.compile)
    rng: np.random.Generator | None = None  # what its update draws from, besides torch (kept per rank)

    if TYPE_CHECKING:  # what subclasses set
        lr: LearningRate  # the learning rate and its schedule
        gradient_step: Any  # an EagerStep or CompiledStep (rlpar.learning.optimization.compiled)

    def __init__(self, *, policy_spec, total_steps: int, seed: int, device: str | torch.device = "cpu", model=None):
        """`model`: the module to learn, when it is not `policy_spec.build()`."""
        torch.manual_seed(seed)
        self.policy_spec = policy_spec
        self.total_steps = total_steps
        self.device = torch.device(device)
        self.model = (policy_spec.build() if model is None else model).to(self.device)
        self.parameters = list(self.model.parameters())

    @abstractmethod
    def learn(self, inputs: dict) -> dict:
        """The gradient steps of one update on prepared inputs (the whole batch's, or in a learner
        group this learner's part: `input_layout`); their diagnostics."""

    def set_optimizer(
        self, optimizer, *, max_grad_norm: float, max_consecutive_nonfinite: int, precision: str = "fp32"
    ) -> None:
        """The optimiser of the model's parameters, and the guarded step that applies it (in
        `precision`: rlpar.learning.optimization.precision)."""
        self.optimizer = optimizer
        self.step = GuardedStep(
            parameters=self.parameters,
            optimizer=optimizer,
            max_grad_norm=max_grad_norm,
            max_consecutive_nonfinite=max_consecutive_nonfinite,
            precision=precision,
            device_type=self.device.type,
        )

    def set_learning_rate(self, steps_seen: int) -> float:
        """The rate of the coming steps after `steps_seen` env steps (`self.lr`), set; returns it."""
        return self.lr.apply(self.optimizer, steps_seen=steps_seen, total_steps=self.total_steps)

    def settle_steps(self) -> None:
        """Count the non-finite steps a compiled step skipped (CompiledStep.settle), after a
        run of steps whose results were not read one by one."""
        self.gradient_step.settle()

    def on_joining_peers(self) -> None:
        """What else learning with peers needs, once they have made this learner's steps eager
        and its weights theirs (rlpar.learners.peers.join): nothing here."""

    def step_on_valid_steps(self, inputs: dict, names: tuple[str, ...], *, sequence_length: int | None = None):
        """One gradient step on the valid steps of `inputs`' arrays `names` (the whole batch, or
        with peers this learner's environment columns of it); the loss's parts. A recurrent
        model's step takes pieces of `sequence_length` steps (None: whole rollouts), each
        unrolled from its stored state (rlpar.learning.estimators.sequences), so the loss sees the valid
        steps through the memory that acted on them. The parts are the whole batch's."""
        self.peers.receive(self.model, self.optimizer, inputs["lr"])
        _, parts = self.gradient_step(**self.learning_tensors(inputs, names, sequence_length=sequence_length))
        self.gradient_step.settle()
        return self.peers.mean(parts, samples=int(np.count_nonzero(inputs["valid"])))

    def learning_tensors(self, inputs: dict, names: tuple[str, ...], *, sequence_length: int | None) -> dict:
        """`inputs`' arrays `names` ([T, E] time-major) as what losses take: the flat valid steps;
        for a recurrent model, [L, P] pieces of `sequence_length` steps (None: whole rollouts)
        with their `valid` steps and stored `initial_state` (rlpar.learning.estimators.sequences)."""
        return step_tensors(
            {name: inputs[name] for name in names},
            valid=inputs["valid"],
            states=inputs["states"],
            length=sequence_length,
            device=self.device,
            recurrent=self.model.recurrent,
        )

    def minibatch_pass(self, data: dict, minibatch_size: int, after_step=None) -> tuple[list[torch.Tensor], list[int]]:
        """One pass of shuffled minibatches over `learning_tensors`' `data` (with peers, every
        learner as many: `minibatch_plan`), drawn from `self.rng`; `after_step()` after each
        step. A recurrent policy's minibatches are whole pieces, about `minibatch_size` steps each.
        Each step's loss parts, and the samples (rows or pieces) of each step's minibatch."""
        assert self.rng is not None, "a learner that takes minibatch passes draws their order from self.rng"
        if "valid" in data:  # mb: pieces a minibatch
            size, mb = data["valid"].shape[1], pieces_per_minibatch(data["valid"], minibatch_size)
            plan = {"size": minibatch_size}
        else:
            size = len(data["obs"])
            mb, count = self.peers.minibatch_plan(size, minibatch_size)
            plan = {"size": mb, "count": count}
        order = torch.from_numpy(self.rng.permutation(size))
        stats = []
        for part in minibatches(data, order, **plan):  # one minibatch at a time: after_step may act between
            stats.append(self.gradient_step.steps(**part)[1][0])
            if after_step is not None:
                after_step()
        return stats, [mb] * len(stats)

    def minibatch_means(self, stats: list[torch.Tensor], samples: list[int], parts: int) -> torch.Tensor:
        """The loss parts of a run of minibatch steps (`minibatch_pass`): each minibatch's over
        all its rows, every learner's, then the mean over minibatches; NaN where none ran."""
        if not stats:
            return torch.full((parts,), float("nan"))
        return self.peers.means_per_row(torch.stack(stats), samples=samples).nanmean(0)

    def state_dict(self) -> dict:
        """Weights, optimiser state and the minibatches' generator (`rng`, where it has one); a
        learner with more (target networks, a second optimiser) extends both. Its algorithm's
        checkpoint holds them as they are."""
        state = {"model": self.model.state_dict(), "optimizer": optimizer_state(self.optimizer)}
        if self.rng is not None:  # its minibatches' order: a resumed run draws the same
            state["rng"] = self.rng.bit_generator.state
        return state

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        if self.rng is not None:
            self.rng.bit_generator.state = state["rng"]
