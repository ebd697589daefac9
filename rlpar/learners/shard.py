"""Cutting an update's [T, E] inputs between learners by environment column: every rank gets
whole columns, so no sequence (an episode, a recurrent rollout) is ever split."""

from __future__ import annotations

import numpy as np


def column_shards(num_envs: int, world_size: int) -> list[np.ndarray]:
    """Each rank's environment columns: contiguous, sizes differing by at most one."""
    if num_envs < world_size:
        raise ValueError(f"{num_envs} environments cannot be shared by {world_size} learners (one column each at least)")
    return np.array_split(np.arange(num_envs), world_size)


def take_columns(arrays: dict, columns: np.ndarray) -> dict:
    """The time-major arrays' `columns` (axis 1, copied: a shard travels to another process);
    anything else (scalars, flags) as it is."""
    return {name: np.ascontiguousarray(a[:, columns]) if isinstance(a, np.ndarray) and a.ndim >= 2 else a
            for name, a in arrays.items()}


def row_ranges(rows: int, world_size: int) -> list[tuple[int, int]]:
    """Each rank's rows of a minibatch of `rows` (replay transitions, not sequences):
    contiguous [start, stop), sizes differing by at most one."""
    if rows < world_size:
        raise ValueError(f"a minibatch of {rows} rows cannot be shared by {world_size} learners (one row each at least)")
    return [(int(part[0]), int(part[-1]) + 1) for part in np.array_split(np.arange(rows), world_size)]
