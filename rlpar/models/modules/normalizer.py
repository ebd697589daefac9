"""Running observation statistics kept as module buffers, so they travel with the weights."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rlpar.models.moments import merge_moments


class ObservationNormalizer(nn.Module):
    """Running mean/variance of raw observations (identity statistics when disabled).

    Statistics change only in the learner, between rounds, never during a rollout, so every
    worker of a round normalises with the same numbers (see NumpyPolicy.normalize). The `kept`
    columns (start, stop), an action mask's, keep mean 0 and variance 1: whitening leaves them as
    they are.
    """

    mean: torch.Tensor  # buffers (register_buffer), declared for the type checker
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int, enabled: bool, epsilon: float = 1e-4, kept: tuple[int, int] | None = None):
        super().__init__()
        self.enabled = enabled
        self.kept = kept
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    def update(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: int) -> None:
        """Merge a batch's moments (parallel-variance formula)."""
        if not self.enabled or batch_count == 0:
            return
        mean, var, count = merge_moments(
            self.mean.cpu().numpy(), self.var.cpu().numpy(), float(self.count), batch_mean, batch_var, batch_count
        )  # the buffers live where the model does (a GPU learner's included); the moments are merged on the CPU
        if self.kept is not None:
            mean[self.kept[0] : self.kept[1]], var[self.kept[0] : self.kept[1]] = 0.0, 1.0
        self.mean.copy_(torch.from_numpy(mean))
        self.var.copy_(torch.from_numpy(var))
        self.count.fill_(count)
