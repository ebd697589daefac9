"""The local sampler against the raw native vector env, in one process and alternating: env
steps per second of Gymnasium's own numpy vector env stepping N environments with random
actions, and of rlpar's `parallel=local` sampler with N environments (acting with the policy,
recording the rollout; fixed weights, no learning).

    .venv/bin/python benchmarks/sampler_vs_raw.py                  # CartPole-v1, 64 environments
    .venv/bin/python benchmarks/sampler_vs_raw.py --num-envs 8 --env Pendulum-v1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlpar.config.compose import compose_config  # noqa: E402
from rlpar.runtime.build import build_trainer  # noqa: E402


def raw_rate(venv: gym.vector.VectorEnv, steps: int) -> float:
    """Env steps/s of `venv` with random actions drawn from its action space each step."""
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(venv.action_space.sample())
    return steps * venv.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    try:
        raw_env = gym.make_vec(args.env, num_envs=args.num_envs, vectorization_mode="vector_entry_point")
        kind = "Gymnasium's native vector env"
    except Exception:  # noqa: BLE001 - no native vector env for this id
        raw_env = gym.make_vec(args.env, num_envs=args.num_envs, vectorization_mode="sync")
        kind = "Gymnasium's SyncVectorEnv"
    raw_env.reset(seed=0)
    with TemporaryDirectory() as run_dir:
        cfg = compose_config(["progress=false", "checkpoint.every=0", f"env.id={args.env}", "parallel=local",
                              "workers=1", f"envs_per_worker={args.num_envs}",
                              f"algo.rollout_length={args.rollout_length}"], run_dir=run_dir)
        trainer = build_trainer(cfg)
        try:
            sampler, weights = trainer.algorithm.sampler, trainer.algorithm.get_weights()
            sampler.sample(weights, 0)  # warm-up
            raw, sampled = [], []
            for _ in range(args.rounds):
                raw.append(raw_rate(raw_env, args.rollout_length))
                start = time.perf_counter()
                steps = sampler.sample(weights, 0).num_steps
                sampled.append(steps / (time.perf_counter() - start))
        finally:
            trainer.close()
    raw_median, sampled_median = statistics.median(raw), statistics.median(sampled)
    print(f"{args.env}, {args.num_envs} environments, {args.rounds} alternating rounds of {args.rollout_length} steps")
    print(f"raw ({kind}, random actions): {raw_median:,.0f} env steps/s")
    print(f"rlpar parallel=local sampler:  {sampled_median:,.0f} env steps/s = {sampled_median / raw_median:.0%} of raw")


if __name__ == "__main__":
    main()
