"""A replay shard: storage plus prioritised sampling behind four calls, so that it can live in a
Ray actor of its own (Ape-X with parallel=distributed: actors write to it directly, the learner
samples from it) or in the learner's process (parallel=local and multiprocess)."""

from __future__ import annotations

import os

import numpy as np

from rlpar.replay.samplers import PrioritizedSampler
from rlpar.replay.storage import RingStorage


def transition_fields(obs_dim: int) -> dict:
    """What a replayed n-step transition holds (see NStepWriter)."""
    obs = ((obs_dim,), np.float32)
    return {"obs": obs, "actions": ((), np.int64), "rewards": ((), np.float32), "next_obs": obs,
            "discounts": ((), np.float32)}


class ReplayShard:
    def __init__(self, *, capacity: int, obs_dim: int, alpha: float, beta_start: float, beta_end: float,
                 beta_steps: int, seed: int):
        self.storage = RingStorage(capacity=capacity, fields=transition_fields(obs_dim))
        self.sampler = PrioritizedSampler(capacity=capacity, alpha=alpha, beta_start=beta_start, beta_end=beta_end,
                                          beta_steps=beta_steps, seed=seed)
        self.inserted = 0

    def add(self, transitions: dict, priorities: np.ndarray) -> int:
        """Transitions with the priorities their actor computed (|n-step TD error|)."""
        slots = self.storage.add({name: transitions[name] for name in self.storage.fields})
        self.sampler.on_insert(slots, priorities)
        self.inserted += len(slots)
        return len(slots)

    def sample(self, batch_size: int):
        """(slots, importance weights, transitions, beta), or None until `batch_size` items are in."""
        if self.storage.size < batch_size:
            return None
        slots, weights = self.sampler.sample(batch_size=batch_size, size=self.storage.size)
        return slots, weights, self.storage.get(slots), self.sampler.beta

    def update_priorities(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        self.sampler.update_priorities(slots, td_errors)

    def stats(self) -> dict:
        return {"size": self.storage.size, "inserted": self.inserted}

    def location(self) -> tuple[str | None, int]:
        """(Ray node id or None outside Ray, process id): where this shard lives."""
        try:
            import ray

            node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        except ImportError:
            node = None
        return node, os.getpid()
