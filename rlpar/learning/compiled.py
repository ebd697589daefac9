"""`algo.compile`: the loss of one gradient step (forward and loss; backward runs through the
compiled graph) compiled with torch.compile.

Measured on the 2-core VM, one PPO minibatch step (64x64 actor-critic, 64 samples, Pendulum
shapes, LeanAdam and clipping eager, 1 thread): 469 us eager, 285 us with the loss compiled
(1.65x); compiling only the model's forward saved nothing (467 us). The first call compiles:
13 s cold, 2-3.5 s from Inductor's on-disk cache, which rlpar keeps in ~/.cache/rlpar/inductor
(TORCHINDUCTOR_CACHE_DIR, if you set none), so it is paid once per machine and shape.
`auto` compiles only runs long enough to win even cold: AUTO_MIN_GRADIENT_STEPS x 0.18 ms saved
is 18 s, more than the 13 s cold compile. A2C's rollout loss (64 samples of varying count,
dynamic shapes): 414 us eager, 327 us compiled, 5.1 s to compile. Compiling binds methods, not
the module, so state dicts and checkpoints are the same compiled or eager.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTO_MIN_GRADIENT_STEPS = 100_000
CACHE_DIR = Path.home() / ".cache" / "rlpar" / "inductor"


def compile_setting(setting: str | bool, *, expected_gradient_steps: int) -> bool:
    """Whether to compile: `true`, `false`, or `auto` (by the run's expected gradient steps)."""
    if setting == "auto":
        return expected_gradient_steps >= AUTO_MIN_GRADIENT_STEPS
    return bool(setting)


def maybe_compile(loss_fn, *, enabled: bool, dynamic: bool = False):
    """`loss_fn` itself, or compiled: for fixed shapes (minibatches are all the same size), or
    `dynamic` ones (a rollout's valid steps vary)."""
    if not enabled:
        return loss_fn
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(CACHE_DIR))
    import torch

    return torch.compile(loss_fn, dynamic=dynamic)
