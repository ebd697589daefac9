"""A replay table (storage, prioritised sampling and a rate limiter behind a few calls) and
`ReplayShard`, the same as a Ray actor.

Ape-X keeps tables in the learner's process with parallel=local and multiprocess, and one
`ReplayShard` actor per shard with parallel=distributed, where the actors write to it directly
and the learner samples it. A table never blocks: `add` and `sample` answer None while the rate
limiter refuses, and the caller waits (an actor retries its write; the learner goes to collect
rollouts). An actor that blocked on the limiter would hold the actor's only thread and queue
the learner's requests behind it; an asynchronous actor avoids that but costs a fifth of a
gradient step more per minibatch (docs/benchmarks.md, "Figures behind design choices in rlpar/").
"""

from __future__ import annotations

import os

import numpy as np

from rlpar.replay.frames import replay_storage
from rlpar.replay.rate_limiter import RateLimiter
from rlpar.replay.samplers import PrioritizedSampler


def transition_fields(obs_dim: int, obs_dtype: str = "float32", action_size: int = 0) -> dict:
    """What a replayed n-step transition holds (see NStepWriter); images stay uint8. Actions are
    one index (`action_size` 0: a Q-network's) or a point of [-1, 1]^action_size (Box actions)."""
    obs = ((obs_dim,), np.dtype(obs_dtype))
    actions = ((action_size,), np.float32) if action_size else ((), np.int64)
    return {"obs": obs, "actions": actions, "rewards": ((), np.float32), "next_obs": obs, "discounts": ((), np.float32)}


class ReplayTable:
    def __init__(
        self,
        *,
        capacity: int,
        obs_dim: int,
        obs_dtype: str = "float32",
        action_size: int = 0,
        alpha: float,
        beta_start: float,
        beta_end: float,
        beta_steps: int,
        seed: int,
        rate_limiter: dict,
        frame_stack: int = 0,
        frames_per_transition: float = 1.125,
    ):
        """`rate_limiter`: RateLimiter's keyword arguments (its batches are the largest insert
        and the minibatch this table serves); `action_size`: as transition_fields; `frame_stack`
        > 0: observations are stacks of that many frames, each stored once (rlpar.replay.frames)."""
        self.storage = replay_storage(
            capacity=capacity,
            fields=transition_fields(obs_dim, obs_dtype, action_size),
            stack=frame_stack,
            frames_per_transition=frames_per_transition,
        )
        self.sampler = PrioritizedSampler(
            capacity=capacity, alpha=alpha, beta_start=beta_start, beta_end=beta_end, beta_steps=beta_steps, seed=seed
        )
        self.limiter = RateLimiter(**rate_limiter)
        self.capacity = capacity

    def add(self, transitions: dict, priorities: np.ndarray) -> int | None:
        """Transitions with the priorities their actor computed (|n-step TD error|): how many
        were stored, or None (nothing stored) while the limiter refuses them."""
        if not self.limiter.can_insert(len(priorities)):
            return None
        slots = self.storage.add({name: transitions[name] for name in self.storage.fields})
        self.sampler.on_insert(slots, priorities)
        self.sampler.forget(self.storage.take_lost())
        self.limiter.record_insert(len(slots))
        return len(slots)

    def sample(self, batch_size: int):
        """(item numbers, importance weights, transitions, beta), or None while the limiter
        refuses. Item k of the table is the k-th inserted (slot k mod capacity in the ring)."""
        if not self.limiter.can_sample(batch_size) or self.storage.size < batch_size:
            return None
        slots, weights = self.sampler.sample(batch_size=batch_size, size=self.storage.size)
        self.limiter.record_sample(batch_size)
        inserted = self.limiter.inserts
        items = inserted - 1 - (inserted - 1 - slots) % self.capacity
        return items, weights, self.storage.get(slots), self.sampler.beta

    def update_priorities(self, items: np.ndarray, td_errors: np.ndarray) -> None:
        """New priorities for the items still stored: the learner's answer arrives after actors
        may have overwritten some of the slots it sampled, whose new items keep their own (or
        lost their frames, rlpar.replay.frames: forgotten, they stay so)."""
        slots = items % self.capacity
        kept = (items >= self.limiter.inserts - self.capacity) & self.storage.intact(slots)
        self.sampler.update_priorities(slots[kept], np.asarray(td_errors)[kept])

    def stats(self) -> dict:
        return {"size": self.storage.size, "inserted": self.limiter.inserts, "sampled": self.limiter.samples}


class ReplayShard(ReplayTable):
    """A table as a Ray actor (its processes are named `ray::ReplayShard`)."""

    def location(self) -> tuple[str, int]:
        """(Ray node id, process id): where this shard lives."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()
