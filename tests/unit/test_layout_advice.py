"""A layout likely slower than a simpler one says so once, at the budget line: more Ray workers
than cores on an environment whose step costs little CPU (rlpar.sampling.cost)."""

import time

import gymnasium as gym
import pytest

from rlpar.config.compose import compose_config
from rlpar.envs.factory import resolve_env_spec
from rlpar.runtime.run import _layout_advice
from rlpar.sampling.cost import CHEAP_STEP_CPU_S, oversubscribed_ray_advice, step_cpu_seconds


class _DearEnv(gym.Env):
    """A step that burns twice the cheap limit of CPU (a simulator's worth)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        started = time.thread_time()
        while time.thread_time() - started < 2 * CHEAP_STEP_CPU_S:
            pass
        return self.observation_space.sample(), 0.0, False, False, {}


@pytest.mark.slow
def test_sixteen_ray_workers_on_two_cores_for_cartpole_are_told_parallel_local_is_likely_faster():
    cfg = compose_config(["parallel=distributed", "workers=16", "ray.num_cpus=2"], run_dir="/unused")
    line = _layout_advice(cfg, resolve_env_spec(**cfg.env))
    assert line.startswith("rlpar: 16 Ray workers on 2 cores for CartPole-v1, whose step takes ")
    assert "Likely faster: parallel=local (measured on 2 cores" in line and "docs/benchmarks.md" in line
    assert "\n" not in line


def test_layouts_the_model_has_no_measurement_for_are_not_judged():
    cartpole = gym.make("CartPole-v1")
    cheap = lambda: step_cpu_seconds(cartpole)  # noqa: E731
    assert step_cpu_seconds(cartpole) < CHEAP_STEP_CPU_S
    assert oversubscribed_ray_advice(sampler="distributed", workers=16, cores=2, env_name="CartPole-v1", step_cpu_s=cheap)
    for sampler, workers, cores in (("distributed", 2, 2), ("local", 16, 2), ("multiprocess", 16, 2),
                                    ("distributed", 16, None)):  # within the cores, no Ray, a cluster
        assert oversubscribed_ray_advice(sampler=sampler, workers=workers, cores=cores, env_name="CartPole-v1",
                                         step_cpu_s=cheap) is None
    dear = _DearEnv()
    assert step_cpu_seconds(dear) >= CHEAP_STEP_CPU_S
    assert oversubscribed_ray_advice(sampler="distributed", workers=16, cores=2, env_name="dear",
                                     step_cpu_s=lambda: step_cpu_seconds(dear)) is None
