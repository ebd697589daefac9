"""CartPole-v1 throughput: RLlib PPO with 2 env runners vs `parallel=distributed workers=2`.

RLlib needs its own environment (it pins its own Gymnasium), e.g.

    python3 -m venv /tmp/rllib_venv && /tmp/rllib_venv/bin/pip install torch==2.13.0 "ray[rllib]==2.60.0"
    /tmp/rllib_venv/bin/python benchmarks/compare_rllib.py rllib      # RLlib's figures
    .venv/bin/python benchmarks/compare_rllib.py rlpar                # rlpar's figures

Both report seconds from process start to the end of the first training iteration and env steps
per second over the first ~60k env steps (training included), on a private Ray instance bound to
127.0.0.1 with the dashboard off.
"""

from __future__ import annotations

import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
STEPS = 60_000


def rllib() -> None:
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", object_store_memory=256 * 2**20,
             log_to_driver=False)
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4)
        .training(train_batch_size_per_learner=4000)
    )
    algo = config.build_algo()
    first = None
    start = time.perf_counter()
    steps = 0
    while steps < STEPS:
        result = algo.train()
        if first is None:
            first = time.perf_counter() - T0
            start = time.perf_counter()
            base = result["num_env_steps_sampled_lifetime"]
        steps = result["num_env_steps_sampled_lifetime"] - base
    fps = steps / (time.perf_counter() - start)
    print(f"RLlib PPO, 2 env runners: first iteration done {first:.1f} s after start, {fps:,.0f} env steps/s after it")
    algo.stop()
    ray.shutdown()


def rlpar() -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from rlpar.config.compose import compose_config
    from rlpar.runtime.build import build_trainer
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["parallel=distributed", "workers=2", "progress=false", *sys.argv[2:]]
        trainer = build_trainer(compose_config(overrides, run_dir=tmp))
        trainer.train()
        first = time.perf_counter() - T0
        start, base = time.perf_counter(), trainer.env_steps
        while trainer.env_steps - base < STEPS:
            trainer.train()
        fps = (trainer.env_steps - base) / (time.perf_counter() - start)
        trainer.close()
    print(f"rlpar {' '.join(overrides[:2] + overrides[3:])}: first iteration done {first:.1f} s after start, {fps:,.0f} env steps/s after it")


if __name__ == "__main__":
    {"rllib": rllib, "rlpar": rlpar}[sys.argv[1]]()
