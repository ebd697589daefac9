"""The `algo.replay` node of value-based algorithms: what the replay keeps and how it samples."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplaySettings:
    capacity: int = 100_000          # transitions kept (oldest overwritten)
    prioritized: bool = False        # proportional prioritisation (Schaul et al. 2016); else uniform
    alpha: float = 0.6               # priority exponent
    beta_start: float = 0.4          # importance-sampling exponent, annealed to beta_end
    beta_end: float = 1.0
    checkpoint: bool = False         # DQN: save the contents with every checkpoint (exact resume)
    num_shards: int = 2              # Ape-X: replay shards (Ray actors with parallel=distributed)
    # Ape-X: each shard's rate limiter holds sampled items per inserted transition at
    # samples_per_insert (null: replay_ratio x batch_size) within rate_tolerance sampled items
    # (null: the least that cannot deadlock plus room for every actor's unanswered
    # writes).
    samples_per_insert: float | None = None
    rate_tolerance: float | None = None
