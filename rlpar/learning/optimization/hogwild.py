"""A3C's parameter server with parallel=multiprocess, as the paper ran it: the model's parameters,
the optimiser's statistics and two counters in shared memory, updated in place by every worker
process without locks (Hogwild; Recht et al. 2011, Mnih et al. 2016 §4).

The learner builds it once (and again on a resume) and sends it to each worker with its first
request (as the address of a service, rlpar.sampling.services): one pickle holds
the model, its optimiser and the counters, so the optimiser's parameters are the model's, and
their shared storage travels as handles, not copies. A worker reads the newest weights before
each rollout and applies its gradient right after; `apply` answers how many updates other
workers made in between (the gradient's staleness). The counters' increments may race, so under
contention the version can undercount the updates by a few.
"""

from __future__ import annotations

import torch

from rlpar.learning.optimization.optim import load_optimizer_state, optimizer_state
from rlpar.learning.optimization.parameter_server import TargetNetwork, apply_gradient, numpy_weights
from rlpar.learning.optimization.step import GuardedStep

VERSION, ENV_STEPS = 0, 1


class SharedParameters:
    def __init__(
        self,
        *,
        model,
        optimizer,
        learning_rate,
        total_steps: int,
        max_grad_norm: float,
        max_consecutive_nonfinite: int,
        target_update_every: int | None = None,
        state: dict | None = None,
    ):
        """`model` and `optimizer` are the learner's: moved into shared memory in place (a target
        network too, with `target_update_every`, refreshed by whichever worker's update crosses
        a multiple); `state`: what `state()` returned, loaded first (a resume: the optimiser's
        state arrives in new tensors, shared here before any worker is sent them)."""
        if state is not None:
            model.load_state_dict(state["model"])
            load_optimizer_state(optimizer, state["optimizer"])
        model.share_memory()
        self.target = TargetNetwork(model, target_update_every) if target_update_every else None
        if self.target is not None:
            self.target.model.share_memory()
        for tensor in optimizer_tensors(optimizer):
            tensor.share_memory_()
        self.model, self.optimizer = model, optimizer
        self.counters = torch.zeros(2, dtype=torch.int64).share_memory_()
        if state is not None:
            self.counters.copy_(torch.tensor([state["version"], state["env_steps"]]))
        self.learning_rate, self.total_steps = learning_rate, total_steps
        self.max_grad_norm, self.max_consecutive_nonfinite = max_grad_norm, max_consecutive_nonfinite
        self.step: GuardedStep | None = None  # each process builds its own guard (its counts are per worker)

    @property
    def version(self) -> int:
        return int(self.counters[VERSION])

    def weights(self) -> tuple[dict, int]:
        """A numpy copy of the newest weights, and their version (read without a lock: another
        worker may be writing them)."""
        version = self.version
        return numpy_weights(self.model, self.target), version

    def apply(self, gradients, version: int, env_steps: int, obs_moments=None) -> dict:
        if self.step is None:
            self.step = GuardedStep(
                parameters=list(self.model.parameters()),
                optimizer=self.optimizer,
                max_grad_norm=self.max_grad_norm,
                max_consecutive_nonfinite=self.max_consecutive_nonfinite,
            )
        staleness = self.version - version
        apply_gradient(
            self.step,
            gradients,
            model=self.model,
            learning_rate=self.learning_rate,
            steps_seen=int(self.counters[ENV_STEPS]) + env_steps,
            total_steps=self.total_steps,
            obs_moments=obs_moments,
        )
        self.counters += torch.tensor([1, env_steps])
        if self.target is not None:
            self.target.refresh(self.version)
        return {"staleness": staleness, "version": self.version, "nonfinite_updates": self.step.nonfinite_updates}

    def state(self) -> dict:
        """Weights, optimiser state and counters, copied (workers may be writing them): a
        checkpoint's checksum and the bytes it saves must be of the same values."""
        return {
            "model": {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()},
            "optimizer": optimizer_state(self.optimizer),
            "version": int(self.counters[VERSION]),
            "env_steps": int(self.counters[ENV_STEPS]),
        }

    def __getstate__(self) -> dict:
        return {**self.__dict__, "step": None}


def optimizer_tensors(optimizer) -> list[torch.Tensor]:
    """Every state tensor of a torch optimiser, created now if it is created lazily (a shared
    statistic must exist before the workers start)."""
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    if not optimizer.state:
        lr = optimizer.param_groups[0]["lr"]
        optimizer.param_groups[0]["lr"] = 0.0
        for p in parameters:
            p.grad = torch.zeros_like(p)
        optimizer.step()  # with lr 0 and zero gradients: creates the state, changes no parameter
        optimizer.param_groups[0]["lr"] = lr
        for p in parameters:
            p.grad = None
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
