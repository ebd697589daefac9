"""What every algorithm offers the Trainer: one training step, weights, and its state.

The algorithm owns its iteration: what it samples, how it learns, when it pushes weights (and,
later, replay). The Trainer keeps what all share: the clock, episode statistics, metrics,
logging, progress, checkpoints, signals and resume.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from rlpar.sampling.batch import Batch, nonfinite_inputs
from rlpar.sampling.errors import NonFiniteObservationError


@dataclass
class StepResult:
    """What one iteration produced, for the Trainer's bookkeeping."""

    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)  # losses, timings, lag...: logged as they are


class Algorithm(ABC):
    """Base of every algorithm: a sampler, a torch model of `policy_spec`, a policy version."""

    def __init__(self, *, sampler, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        torch.manual_seed(seed)
        self.sampler = sampler
        self.policy_spec = policy_spec
        self.total_steps = total_steps
        self.device = torch.device(device)
        self.model = policy_spec.build().to(self.device)
        self.version = 0  # updates so far: the policy version that acting data carries
        self.steps_seen = 0

    @abstractmethod
    def training_step(self) -> StepResult: ...

    def get_weights(self) -> dict:
        """CPU numpy copies: cheap to send to any process and safe to hold across updates."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def sample(self) -> tuple[Batch, dict]:
        """A batch acted with the current weights (blocking samplers) or recent ones (non-blocking),
        refused if the environments returned NaN or infinities, and its timings."""
        start = time.perf_counter()
        weights = self.get_weights()
        fetched = time.perf_counter()
        batch = self.sampler.sample(weights, self.version)
        problem = nonfinite_inputs(batch)
        if problem:
            raise NonFiniteObservationError(f"{problem}; check the environment")
        metrics = self.sampler.metrics()
        metrics["time_weight_sync_s"] = metrics.get("time_weight_sync_s", 0.0) + fetched - start
        return batch, metrics

    @abstractmethod
    def state_dict(self) -> dict: ...

    @abstractmethod
    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None:
        self.sampler.close()


def valid_step_tensors(arrays: dict, valid, device) -> dict:
    """Time-major [T, N, ...] arrays as flat tensors of their valid steps only (autoreset steps
    are not transitions: never trained on)."""
    keep = valid.reshape(-1)
    return {name: torch.as_tensor(a.reshape((-1,) + a.shape[2:])[keep], device=device) for name, a in arrays.items()}


def explained_variance(predicted, target) -> float:
    import numpy as np

    var = np.var(target)
    return float("nan") if var == 0 else float(1.0 - np.var(target - predicted) / var)
