"""Optimisers (torch's), their state, and Polyak averaging.

Adam is `torch.optim.Adam(fused=True)` with its state created up front: the compiled step
(rlpar.learning.optimization.compiled) reads and writes those tensors in its graph, and A3C's Hogwild learner
shares them between processes before any step. Gradients are clipped with
`torch.nn.utils.clip_grad_norm_` (rlpar.learning.optimization.step). What torch's Adam costs against the
hand-written one it replaced: docs/benchmarks.md, "Compiled learner".
"""

from __future__ import annotations

import copy

import torch


def adam(parameters, *, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """torch's fused Adam, its state (step, exp_avg, exp_avg_sq) created now rather than at the first step."""
    optimizer = torch.optim.Adam(parameters, lr=lr, eps=eps, fused=True)
    for p in optimizer.param_groups[0]["params"]:
        optimizer.state[p] = {
            "step": torch.zeros((), dtype=torch.float32, device=p.device),  # as fused Adam's own
            "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
        }
    return optimizer


def adam_state(optimizer: torch.optim.Adam) -> tuple[list, list, list]:
    """Adam's exp_avg, exp_avg_sq and step tensors, in parameter order (those the optimiser holds
    now: loading a state dict replaces them)."""
    states = [optimizer.state[p] for p in optimizer.param_groups[0]["params"]]
    return [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [s["step"] for s in states]


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """`optimizer.state_dict()` with its tensors copied: torch's are the optimiser's own, which
    its next steps change in place (a state kept in memory, to return to or hand on, must not)."""
    return copy.deepcopy(optimizer.state_dict())


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """`optimizer.load_state_dict` on a copy of `state` (torch's adopts the tensors it is given:
    two optimisers loaded from one state would step the same tensors), also from checkpoints
    written before rlpar used torch's Adam: those hold the lists of rlpar's former `LeanAdam`
    (lr, exp_avg, exp_avg_sq, step)."""
    state = copy.deepcopy(state)
    if "exp_avg" in state and "state" not in state:
        group = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
        count = len(optimizer.param_groups[0]["params"])
        if any(len(state[name]) != count for name in ("exp_avg", "exp_avg_sq", "step")):
            raise ValueError(f"the checkpoint's Adam state has {len(state['exp_avg'])} tensors; this model has {count}")
        state = {
            "state": {
                i: {"step": state["step"][i], "exp_avg": state["exp_avg"][i], "exp_avg_sq": state["exp_avg_sq"][i]}
                for i in range(count)
            },
            "param_groups": [{**group, "lr": state["lr"], "params": list(range(count))}],
        }
    optimizer.load_state_dict(state)


def build_optimizer(parameters, *, optimizer: str, lr: float, optimizer_eps: float, rmsprop_alpha: float = 0.99):
    """RMSprop or Adam (torch's), as the actor-critic algorithms name them."""
    if optimizer == "rmsprop":
        return torch.optim.RMSprop(parameters, lr=lr, alpha=rmsprop_alpha, eps=optimizer_eps)
    if optimizer == "adam":
        return adam(parameters, lr=lr, eps=optimizer_eps)
    raise ValueError(f"optimizer must be rmsprop or adam, got {optimizer!r}")


@torch.no_grad()
def polyak(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """Polyak averaging of a target network: target ← (1 − tau) target + tau online, in place."""
    for target_param, online_param in zip(target.parameters(), online.parameters(), strict=True):
        target_param.lerp_(online_param, tau)
