"""One gradient step that skips, rather than applies, a non-finite loss or gradient."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlpar.learning.errors import NonFiniteLossError
from rlpar.learning.optimization.precision import autocast, loss_scaler


class GuardedStep:
    """backward, clip the global norm, step; a NaN/inf gradient skips the step and is counted,
    and more than `max_consecutive_nonfinite` in a row stop the run (NonFiniteLossError).

    `precision` (rlpar.learning.optimization.precision): the losses it is given are computed under
    `self.autocast()`; with fp16 the loss is scaled before the backward pass and the gradients
    unscaled before the clip, and a gradient that overflowed is skipped and counted the same way
    (the scaler then lowers its scale)."""

    def __init__(
        self,
        *,
        parameters: list[torch.Tensor],
        optimizer,
        max_grad_norm: float,
        max_consecutive_nonfinite: int,
        precision: str = "fp32",
        device_type: str = "cpu",
    ):
        self.parameters = parameters
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self.max_consecutive_nonfinite = max_consecutive_nonfinite
        self.precision, self.device_type = precision, device_type
        self.scaler = loss_scaler(precision, device_type=device_type)
        self.nonfinite_updates = 0
        self.consecutive_nonfinite = 0
        # learners=N: the group whose gradients are averaged before the clip, so every rank
        # clips, checks and applies the same gradient (rlpar.learners.collective); None: alone
        self.collective = None

    def __call__(self, loss: torch.Tensor, *, samples: int = 1) -> None:
        """`samples`: how many samples `loss` is the mean over (weighs this rank's gradient in a group)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()
        if self.collective is not None:
            self.collective.average_gradients(self.parameters, samples=samples)
        if self.scaler is not None:
            # after the all-reduce (as DDP does): every rank unscales the same gradient, finds the
            # same overflow, and its scaler keeps the same scale
            self.scaler.unscale_(self.optimizer)
        self.apply_gradients()

    def apply_gradients(self) -> None:
        """Clip and apply the gradients the parameters hold (a parameter server sets them)."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        finite = math.isfinite(grad_norm.item())
        if finite:
            self.optimizer.step()
        if self.scaler is not None:
            self.scaler.update()  # from the overflow its unscale_ found: lower the scale, or count towards raising it
        self.count(finite)

    def autocast(self):
        """The context the losses this step is given are computed in (nothing for fp32)."""
        return autocast(self.precision, device_type=self.device_type)

    def metrics(self) -> dict:
        """The update's counts: steps skipped for a non-finite gradient, and fp16's loss scale."""
        scale = {} if self.scaler is None else {"loss_scale": self.scaler.get_scale()}
        return {"nonfinite_updates": self.nonfinite_updates, **scale}

    def count(self, finite: bool) -> None:
        """Record whether a step's gradient was finite (a compiled step skips them itself)."""
        if finite:
            self.consecutive_nonfinite = 0
            return
        self.nonfinite_updates += 1  # a NaN/inf loss or gradient: skip it rather than poison the weights
        self.consecutive_nonfinite += 1
        if self.consecutive_nonfinite > self.max_consecutive_nonfinite:
            raise NonFiniteLossError(
                f"{self.consecutive_nonfinite} gradient steps in a row had a non-finite loss or gradient "
                f"({self.nonfinite_updates} in all); stopping. Lower algo.lr or check the environment's rewards."
            )


def linear_schedule(base: float, *, steps_seen: int, total_steps: int, min_fraction: float) -> float:
    """`base` decayed linearly to `min_fraction * base` over `total_steps`."""
    progress = min(steps_seen / max(total_steps, 1), 1.0)
    return base * max(1.0 - progress, min_fraction)


@dataclass
class LearningRate:
    """A learning rate, constant or (`anneal`) decayed linearly with env steps to
    `min_fraction` of itself at `total_steps`; `apply` sets it on a one-group optimiser."""

    base: float
    anneal: bool = False
    min_fraction: float = 0.0

    def value(self, *, steps_seen: int, total_steps: int) -> float:
        if not self.anneal:
            return self.base
        return linear_schedule(
            self.base, steps_seen=steps_seen, total_steps=total_steps, min_fraction=self.min_fraction
        )

    def apply(self, optimizer, *, steps_seen: int, total_steps: int) -> float:
        lr = self.value(steps_seen=steps_seen, total_steps=total_steps)
        optimizer.param_groups[0]["lr"] = lr
        return lr
