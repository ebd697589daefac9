"""`algo.precision`: the forward pass and loss in bfloat16 or float16 under torch.autocast, with
the master weights, their gradients and the optimiser kept in float32; fp16, whose narrow range
lets small gradients underflow, also scales the loss (torch.amp.GradScaler, rlpar.learning.optimization.step).

`fp32` is the path without any of it: no autocast context and no scaler. `auto` (the default)
is resolved once per run, before anything is built (`resolve_precision`).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch

LOW_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, *, device_type: str):
    """The context a loss is computed in: autocast to `precision`'s dtype, or nothing for fp32."""
    dtype = LOW_PRECISION_DTYPES.get(precision)
    return nullcontext() if dtype is None else torch.autocast(device_type=device_type, dtype=dtype)


def loss_scaler(precision: str, *, device_type: str) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaler (halved on an overflow, doubled after 2000 finite steps); None otherwise."""
    return torch.amp.GradScaler(device_type) if precision == "fp16" else None


# CPU flags of native bfloat16 arithmetic (Linux's /proc/cpuinfo names)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def resolve_precision(precision: str, *, images: bool, device: str, allowed: tuple[str, ...]) -> str:
    """`auto`: bf16 where it pays, fp32 elsewhere. bf16 halves the time of a convolutional
    network's step on a CPU with native bf16 arithmetic and slows small MLPs down
    (docs/benchmarks.md, "Mixed precision on this CPU"), so: bf16 for image models on a device
    that computes in bf16 natively, when the algorithm learns in it (`allowed`). A rule, not a
    timing, so that one machine picks the same every run. Other values are kept."""
    if precision != "auto":
        return precision
    return "bf16" if images and "bf16" in allowed and native_bf16(device) else "fp32"


def native_bf16(device: str) -> bool:
    """Whether `device` computes in bfloat16 natively (a CUDA GPU that supports it; a CPU with
    avx512_bf16 or AMX, read from Linux's /proc/cpuinfo; elsewhere: not known, so no)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind != "cpu":
        return False
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return False
    return any(flag in flags for flag in BF16_CPU_FLAGS)
