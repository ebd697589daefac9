"""Optimiser steps without per-call bookkeeping.

For small networks the Python around an update costs more than the maths: torch's fused Adam
and foreach gradient clipping prepare on every call the lists their kernels need. These call the
same kernels with lists prepared once. `LeanAdam` is also not a `torch.optim.Optimizer`:
constructing one of those imports torch._dynamo, which costs seconds of start-up. (Figures:
docs/benchmarks.md, "Figures behind design choices in rlpar/".)
"""

from __future__ import annotations

import torch


class LeanAdam:
    """Adam with torch's fused kernel; one learning rate, no AMSGrad, no weight decay.

    `param_groups[0]["lr"]` may be changed between steps (schedules), as with torch optimisers.
    """

    def __init__(self, params, *, lr: float, eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999)):
        self.params = [p for p in params]
        self.param_groups = [{"lr": lr, "params": self.params}]  # "params": as torch's, for GradScaler.unscale_
        self.eps, self.betas = eps, betas
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        torch._foreach_add_(self.steps, 1)
        torch._fused_adam_(
            self.params,
            [p.grad for p in self.params],
            self.exp_avgs,
            self.exp_avg_sqs,
            [],
            self.steps,
            amsgrad=False,
            lr=float(self.param_groups[0]["lr"]),
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=self.eps,
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )

    def state_dict(self) -> dict:
        return {
            "lr": self.param_groups[0]["lr"],
            "exp_avg": [t.clone() for t in self.exp_avgs],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sqs],
            "step": [t.clone() for t in self.steps],
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        self.param_groups[0]["lr"] = state["lr"]
        for name, mine in (("exp_avg", self.exp_avgs), ("exp_avg_sq", self.exp_avg_sqs), ("step", self.steps)):
            if len(state[name]) != len(mine):
                raise ValueError(f"optimizer state has {len(state[name])} {name} tensors, expected {len(mine)}")
            for dst, src in zip(mine, state[name]):
                dst.copy_(src)


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale gradients in place so their global L2 norm is at most `max_norm`; returns the norm."""
    grads = [p.grad for p in params]
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def build_optimizer(parameters, *, optimizer: str, lr: float, optimizer_eps: float, rmsprop_alpha: float = 0.99):
    """RMSprop (torch's) or Adam (LeanAdam), as the actor-critic algorithms name them."""
    if optimizer == "rmsprop":
        # torch.optim: constructing it imports torch._dynamo (0.8-0.9 s of start-up here), and
        # its step costs ~80 us against LeanAdam's ~17 us (an A2C update: ~0.7 ms against ~0.6).
        return torch.optim.RMSprop(parameters, lr=lr, alpha=rmsprop_alpha, eps=optimizer_eps)
    if optimizer == "adam":
        return LeanAdam(parameters, lr=lr, eps=optimizer_eps)
    raise ValueError(f"optimizer must be rmsprop or adam, got {optimizer!r}")
