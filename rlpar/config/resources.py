"""Will the run fit in memory? Checked before anything starts, not found out 80 s in."""

from __future__ import annotations

import os

import numpy as np

GIB = 1024**3


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (what can be allocated without swapping), else all RAM."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def estimated_memory_bytes(*, obs_dim: int, action_size: int, rollout_length: int, num_envs: int, workers: int,
                           hidden_sizes: list[int], copies_of_batch: int, replay_capacity: int = 0,
                           obs_dtype: str = "float32") -> dict[str, int]:
    """Rough bytes of the largest things a run holds, by what they are.

    - batch: observations (float32, or uint8 images) and float32 actions plus four float32 and three bool fields per step,
      held `copies_of_batch` times (worker buffer or shared memory, object store, learner tensors);
    - network: actor and critic (float32), with gradients and two Adam moments on the learner and
      a numpy copy in every worker;
    - environments: the latest float64 observation of each environment, raw and normalised;
    - replay (value-based algorithms): `replay_capacity` transitions of `replay_bytes_per_transition`."""
    obs_bytes = np.dtype(obs_dtype).itemsize
    per_step = obs_bytes * obs_dim + 4 * (action_size + 4) + 3
    batch = per_step * rollout_length * num_envs * copies_of_batch
    sizes = [obs_dim, *hidden_sizes]
    params = 2 * sum(a * b + b for a, b in zip(sizes, sizes[1:])) + hidden_sizes[-1] * (action_size + 1)
    network = 4 * params * (4 + workers)
    environments = 2 * 8 * obs_dim * num_envs
    estimate = {"batch": batch, "network": network, "environments": environments}
    if replay_capacity:
        estimate["replay"] = replay_capacity * replay_bytes_per_transition(obs_dim, obs_dtype)
    return estimate


def replay_bytes_per_transition(obs_dim: int, obs_dtype: str = "float32") -> int:
    """A stored transition (the replay's own field layout) and a float64 priority in each of the
    sum tree's two halves."""
    from rlpar.replay.shard import transition_fields
    from rlpar.replay.storage import RingStorage

    return RingStorage.required_bytes(1, transition_fields(obs_dim, obs_dtype)) + 2 * 8


def memory_problem(estimate: dict[str, int], available: int | None = None) -> str | None:
    available = available_memory_bytes() if available is None else available
    total = sum(estimate.values())
    if total <= 0.9 * available:
        return None
    parts = ", ".join(f"{name} {size / GIB:.1f} GiB" for name, size in estimate.items())
    return (f"memory: this run needs about {total / GIB:.1f} GiB ({parts}) but {available / GIB:.1f} GiB is "
            f"available; use fewer environments (workers, envs_per_worker), a shorter algo.rollout_length, "
            f"smaller model.hidden_sizes, a smaller algo.replay.capacity, or a smaller observation")
