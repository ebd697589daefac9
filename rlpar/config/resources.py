"""Will the run fit on this machine? Memory, processes and file descriptors, checked before
anything starts, not found out 80 s in (or never: 550 forked workers and counting).

The per-part costs below were measured on this project's machines (docs/benchmarks.md,
"What a run costs"); they are rough on purpose, and the check refuses only what is clearly
too big: more than 90% of the memory available now.
"""

from __future__ import annotations

import os
import resource

import numpy as np

GIB = 1024**3
MIB = 1024**2
# Peak bytes per environment, besides its observations: its noise generator and rollout state
# (numpy vector env), or a Python Gymnasium environment object and its wrappers (stepped one by one),
# or an EnvPool environment: its C++ emulator or simulator and the pool's state buffers (0.9-1.3 MiB
# measured for Hopper and Pong).
ENV_BYTES = {"native": 5 * 1024, "sync": 8 * 1024, "envpool": 1 * MIB}
WORKER_PROCESS_BYTES = {"multiprocess": 40 * MIB, "ray": 70 * MIB}  # a forked worker; a Ray env runner
RAY_DAEMONS = 10  # processes a private Ray instance runs besides its workers (GCS, raylet, agents, ...)
FDS_PER_WORKER = {"multiprocess": 3, "ray": 4}  # the learner's pipe and sentinel; the raylet's connections
FDS_BASE = 256  # what the learner, its libraries and Ray hold whatever the worker count


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


def estimated_memory_bytes(
    *,
    obs_dim: int,
    action_size: int,
    rollout_length: int,
    num_envs: int,
    workers: int,
    hidden_sizes: list[int],
    copies_of_batch: int,
    replay_bytes: int = 0,
    obs_dtype: str = "float32",
    vectorization: str = "native",
    worker_processes: int = 0,
    worker_process_bytes: int = 0,
    object_store_bytes: int = 0,
) -> dict[str, int]:
    """Rough bytes of the largest things a run holds, by what they are.

    - batch: observations (float32, or uint8 images) and float32 actions plus four float32 and three bool fields
      per step, held `copies_of_batch` times (worker buffer or shared memory, object store, learner tensors);
    - learning: the whole batch through actor and critic at once (activations and their gradients);
    - network: actor and critic (float32), with gradients and two Adam moments on the learner and
      a numpy copy in every worker;
    - environments: per environment, its state (`ENV_BYTES` by vectorization) and latest float64
      observation, raw and normalised;
    - worker processes and Ray's object store, where they run on this machine;
    - replay (value-based algorithms): `replay_bytes`, as the replay settings price their capacity."""
    obs_bytes = np.dtype(obs_dtype).itemsize
    steps = rollout_length * num_envs
    per_step = obs_bytes * obs_dim + 4 * (action_size + 4) + 3
    batch = per_step * steps * copies_of_batch
    learning = steps * 4 * 2 * 2 * sum(hidden_sizes)
    sizes = [obs_dim, *hidden_sizes]
    params = 2 * sum(a * b + b for a, b in zip(sizes, sizes[1:])) + hidden_sizes[-1] * (action_size + 1)
    network = 4 * params * (4 + workers)
    environments = num_envs * (ENV_BYTES.get(vectorization, ENV_BYTES["sync"]) + 2 * 8 * obs_dim)
    estimate = {"batch": batch, "learning": learning, "network": network, "environments": environments}
    if worker_processes:
        estimate["worker processes"] = worker_processes * worker_process_bytes
    if object_store_bytes:
        estimate["Ray object store"] = object_store_bytes
    if replay_bytes:
        estimate["replay"] = replay_bytes
    return estimate


def memory_problem(estimate: dict[str, int], available: int | None = None) -> str | None:
    available = available_memory_bytes() if available is None else available
    total = sum(estimate.values())
    if total <= 0.9 * available:
        return None
    parts = ", ".join(f"{name} {size / GIB:.1f} GiB" for name, size in estimate.items() if size >= 0.05 * GIB)
    return (
        f"memory: this run needs about {total / GIB:.1f} GiB ({parts}) but {available / GIB:.1f} GiB is "
        f"available; use fewer environments (workers, envs_per_worker), a shorter algo.rollout_length, "
        f"smaller model.hidden_sizes, a smaller algo.replay.capacity, or a smaller observation"
    )


def process_problem(new_processes: int) -> str | None:
    """Whether this user may start `new_processes` more processes (ulimit -u, the kernel's pid_max)."""
    running = sum(1 for entry in os.listdir("/proc") if entry.isdigit()) if os.path.isdir("/proc") else 0
    limits = []
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:  # root is not held to it
        limits.append((soft, "ulimit -u"))
    try:
        with open("/proc/sys/kernel/pid_max") as handle:
            limits.append((int(handle.read()), "/proc/sys/kernel/pid_max"))
    except (OSError, ValueError):
        pass
    for limit, name in limits:
        if running + new_processes > 0.9 * limit:
            return f"processes: {running} run already, and this machine allows {limit} ({name})"
    return None


def file_descriptor_problem(needed: int) -> str | None:
    """Whether this process can hold `needed` file descriptors: the soft limit is raised up to the
    hard one if need be (as Ray does for its own processes); beyond the hard limit, a problem."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return None
    if hard == resource.RLIM_INFINITY or needed <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else needed, hard))
        return None
    return f"file descriptors: they need about {needed}, but this process may open {hard} (ulimit -Hn)"
