"""When a sampler layout is likely slower than a simpler one, said once before training.

The cost model, from measurements on this project's 2-core machines (docs/benchmarks.md, "More
Ray workers than cores"): parallel sampling can only save the environments' share of a step's
time. For an environment whose step costs little CPU that share is small, and Ray workers beyond
the cores add their own overhead (scheduling, transfers, a process each) without adding cores.
So a run with more Ray workers than the cores of its private Ray instance, on an environment
whose step costs under `CHEAP_STEP_CPU_S` of CPU, is told that parallel=local is likely faster,
with the measured figures. Dearer environments, clusters and layouts within the cores are not
judged: the model has no measurement that says they are slower.
"""

from __future__ import annotations

import time

CHEAP_STEP_CPU_S = 100e-6  # an environment step's CPU time below which the model applies
# Training steps/s (lowest-highest) of the measurement docs/benchmarks.md records: PPO, CartPole-v1, 2 cores
LOCAL_MEASURED = "6,600-9,200"
DISTRIBUTED_16_MEASURED = "2,300-3,500"
STEP_TIMING_CPU_S = 0.05  # how much CPU time the step measurement takes at most
STEP_TIMING_MAX_STEPS = 2000


def step_cpu_seconds(env) -> float:
    """CPU seconds one `env.step` takes, random actions, measured in this thread: CPU time, so
    a busy machine does not make a cheap environment look dear."""
    env.reset(seed=0)
    started, steps = time.thread_time(), 0
    while steps < STEP_TIMING_MAX_STEPS and time.thread_time() - started < STEP_TIMING_CPU_S:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    return (time.thread_time() - started) / max(steps, 1)


def oversubscribed_ray_advice(
    *, sampler: str, workers: int, cores: int | None, env_name: str, step_cpu_s
) -> str | None:
    """One line when `workers` Ray workers outnumber the `cores` of a private instance and the
    environment is cheap (see the module's docstring); None otherwise. `step_cpu_s`: a callable
    that measures the step, called only when the layout is in question."""
    if sampler != "distributed" or cores is None or workers <= cores:
        return None
    step_s = step_cpu_s()
    if step_s >= CHEAP_STEP_CPU_S:
        return None
    return (
        f"rlpar: {workers} Ray workers on {cores} cores for {env_name}, whose step takes {step_s * 1e6:.0f} us "
        f"of CPU: workers beyond the cores add Ray's overhead to so cheap an environment, not speed. Likely "
        f"faster: parallel=local (measured on 2 cores, PPO on CartPole-v1: {LOCAL_MEASURED} steps/s, against "
        f"{DISTRIBUTED_16_MEASURED} with parallel=distributed workers=16; docs/benchmarks.md)"
    )
