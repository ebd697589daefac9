"""`algo.precision`: the forward pass and loss in bfloat16 or float16 under torch.autocast, with
the master weights, their gradients and the optimiser kept in float32; fp16, whose narrow range
lets small gradients underflow, also scales the loss (torch.amp.GradScaler, rlpar.learning.optimization.step).

`fp32` is the path without any of it: no autocast context and no scaler.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

LOW_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, *, device_type: str):
    """The context a loss is computed in: autocast to `precision`'s dtype, or nothing for fp32."""
    dtype = LOW_PRECISION_DTYPES.get(precision)
    return nullcontext() if dtype is None else torch.autocast(device_type=device_type, dtype=dtype)


def loss_scaler(precision: str, *, device_type: str) -> torch.amp.GradScaler | None:
    """fp16's dynamic loss scaler (halved on an overflow, doubled after 2000 finite steps); None otherwise."""
    return torch.amp.GradScaler(device_type) if precision == "fp16" else None
