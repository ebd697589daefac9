"""A3C's parameter server: the shared weights and their optimiser, updated by workers' gradients
as each arrives (Mnih et al. 2016), in whatever order the workers finish.

Every gradient carries the version of the weights it was computed with; the server's version
counts the gradients applied, so `version - gradient's version` is how stale the gradient was
(0: nobody else updated the weights in between). With parallel=distributed it is a Ray actor of
this class (`ray::ParameterServer`); with parallel=multiprocess it lives in the learner's process.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from rlpar.learning.optimization.optim import build_optimizer, load_optimizer_state, optimizer_state
from rlpar.learning.optimization.step import GuardedStep, LearningRate


class ParameterServer:
    def __init__(
        self,
        *,
        policy_spec,
        optimizer: dict,
        learning_rate: LearningRate,
        total_steps: int,
        max_grad_norm: float,
        max_consecutive_nonfinite: int,
        seed: int,
        state: dict | None = None,
        target_update_every: int | None = None,
    ):
        """`optimizer`: build_optimizer's keywords; `state`: what `state()` returned (a restart);
        `target_update_every`: keep a target network, a hard copy every so many gradients
        (asynchronous n-step Q-learning), handed out with the weights as `target.<name>`."""
        torch.manual_seed(seed)
        torch.set_num_threads(1)  # one update at a time; the workers need the other cores
        self.model = policy_spec.build()
        self.parameters = list(self.model.parameters())
        self.optimizer = build_optimizer(self.parameters, **optimizer)
        self.step = GuardedStep(
            parameters=self.parameters,
            optimizer=self.optimizer,
            max_grad_norm=max_grad_norm,
            max_consecutive_nonfinite=max_consecutive_nonfinite,
        )
        self.learning_rate, self.total_steps = learning_rate, total_steps
        self.target = TargetNetwork(self.model, target_update_every) if target_update_every else None
        self.version = 0
        self.env_steps = 0  # the experience behind the applied gradients (the lr schedule's clock)
        if state is not None:
            self.load_state(state)

    def apply(self, gradients: list[np.ndarray], version: int, env_steps: int, obs_moments=None) -> dict:
        """One worker's gradient (one array per parameter, in order) applied now; answers the
        newest weights, their version, and how stale the gradient was."""
        staleness = self.version - version
        self.env_steps += env_steps
        apply_gradient(
            self.step,
            gradients,
            model=self.model,
            learning_rate=self.learning_rate,
            steps_seen=self.env_steps,
            total_steps=self.total_steps,
            obs_moments=obs_moments,
        )
        self.version += 1
        if self.target is not None:
            self.target.refresh(self.version)
        weights, version = self.weights()
        return {
            "weights": weights,
            "version": version,
            "staleness": staleness,
            "nonfinite_updates": self.step.nonfinite_updates,
        }

    def weights(self) -> tuple[dict, int]:
        return numpy_weights(self.model, self.target), self.version

    def state(self) -> dict:
        """What a restarted server needs to go on: weights, optimiser state and counters."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": optimizer_state(self.optimizer),
            "version": self.version,
            "env_steps": self.env_steps,
            "nonfinite_updates": self.step.nonfinite_updates,
        }
        if self.target is not None:
            state["target"] = self.target.model.state_dict()
        return state

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.version, self.env_steps = int(state["version"]), int(state["env_steps"])
        self.step.nonfinite_updates = int(state["nonfinite_updates"])
        if self.target is not None:
            self.target.model.load_state_dict(state["target"])


def apply_gradient(
    step: GuardedStep,
    gradients,
    *,
    model,
    learning_rate: LearningRate,
    steps_seen: int,
    total_steps: int,
    obs_moments=None,
) -> None:
    """One worker's gradient (one array per parameter, in order) on a server's model: the lr for
    `steps_seen`, the guarded step (clipped; skipped if not finite), then the observation
    statistics of the rollout behind it."""
    learning_rate.apply(step.optimizer, steps_seen=steps_seen, total_steps=total_steps)
    for parameter, gradient in zip(step.parameters, gradients):
        parameter.grad = torch.as_tensor(gradient)
    step.apply_gradients()
    if obs_moments is not None:
        model.obs_normalizer.update(*obs_moments)


class TargetNetwork:
    """A frozen copy of a model, refreshed by a hard copy every `every` versions."""

    def __init__(self, model, every: int):
        self.model = copy.deepcopy(model).requires_grad_(False)
        self.every, self.source = every, model

    def refresh(self, version: int) -> None:
        if version % self.every == 0:
            self.model.load_state_dict(self.source.state_dict())


def numpy_weights(model, target: TargetNetwork | None = None) -> dict:
    """A numpy copy of the model's weights, with the target network's as `target.<name>`."""
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if target is not None:
        weights.update({f"target.{k}": v.detach().numpy().copy() for k, v in target.model.state_dict().items()})
    return weights
