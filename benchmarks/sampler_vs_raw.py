"""The local sampler against raw vector-env steps, in one process and alternating round by round.

Sides, each stepping N environments (CartPole-v1 and 64 by default):
- raw, Gymnasium: `gym.make_vec(ID, N, vectorization_mode="vector_entry_point")` (Gymnasium's own
  numpy vector env where the id has one, else its SyncVectorEnv), random actions drawn with
  `action_space.sample()` each step;
- raw, rlpar's env: the vector env class rlpar's sampler steps (`rlpar.envs.factory.make_vector_env`:
  for CartPole its per-environment-seeded numpy env), random actions the same way;
- rlpar's `parallel=local` sampler with `model.acting=numpy` (float64: identical batches however
  environments are split) and with `model.acting=numpy32` (float32, opt-in).

What "the sampler" is here: one `sampler.sample(weights, version)` call per round, as a training
iteration makes it: loading the weights into the acting copy, drawing the action noise, T steps of
acting (normalise, forward pass, action draw), stepping and recording the rollout, and the
bootstrap values. No learning: the weights are the untrained network's (near-uniform actions, so
episodes last about as long as with random actions). Training iterations run slower than this by
their learning phase (benchmarks/limits.py measures the split).

    .venv/bin/python benchmarks/sampler_vs_raw.py                  # CartPole-v1, 64 environments
    .venv/bin/python benchmarks/sampler_vs_raw.py --num-envs 8 --env Pendulum-v1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from tempfile import TemporaryDirectory

import gymnasium as gym
from common import machine, markdown_table  # also puts this clone's rlpar on the path

from rlpar.config.compose import compose_config
from rlpar.envs.factory import env_seeds, make_vector_env, resolve_env_spec
from rlpar.runtime.build import build_trainer

ACTING = ("numpy", "numpy32")


def raw_rate(venv: gym.vector.VectorEnv, steps: int) -> float:
    """Env steps/s of `venv` with random actions drawn from its action space each step."""
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(venv.action_space.sample())
    return steps * venv.num_envs / (time.perf_counter() - start)


def sampler_rate(sampler, weights: dict) -> float:
    """Env steps/s of one `sample` call (the weights loaded, one rollout, its bootstrap values)."""
    start = time.perf_counter()
    steps = sampler.sample(weights, 0).num_steps
    return steps / (time.perf_counter() - start)


def gymnasium_env(env_id: str, num_envs: int) -> tuple[gym.vector.VectorEnv, str]:
    try:
        return (gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point"),
                f'gym.make_vec("{env_id}", {num_envs}, vectorization_mode="vector_entry_point")')
    except Exception:  # noqa: BLE001 - no native vector env for this id
        return (gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync"),
                f'SyncVectorEnv (gym.make_vec("{env_id}", {num_envs}, vectorization_mode="sync"): no native one)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--rollout-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    print(machine())
    gym_env, gym_name = gymnasium_env(args.env, args.num_envs)
    gym_env.reset(seed=0)
    with TemporaryDirectory() as run_dir:
        trainers = {}
        try:
            for acting in ACTING:
                cfg = compose_config(["progress=false", "checkpoint.every=0", f"env.id={args.env}", "parallel=local",
                                      "workers=1", f"envs_per_worker={args.num_envs}", f"model.acting={acting}",
                                      f"algo.rollout_length={args.rollout_length}"], run_dir=f"{run_dir}/{acting}")
                trainers[acting] = build_trainer(cfg)
            env_spec = resolve_env_spec(**cfg.env)
            rlpar_env = make_vector_env(env_spec, args.num_envs)
            rlpar_env.reset(seed=env_seeds(env_spec, args.num_envs, 0))
            samplers = {acting: (t.algorithm.sampler, t.algorithm.get_weights()) for acting, t in trainers.items()}
            sides = {"gymnasium": lambda: raw_rate(gym_env, args.rollout_length),
                     "rlpar_env": lambda: raw_rate(rlpar_env, args.rollout_length),
                     **{acting: (lambda s=s, w=w: sampler_rate(s, w)) for acting, (s, w) in samplers.items()}}
            for side in sides.values():  # warm-up
                side()
            rates: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(args.rounds):
                for name, side in sides.items():
                    rates[name].append(side())
        finally:
            for trainer in trainers.values():
                trainer.close()
    names = {"gymnasium": f"raw, Gymnasium's {gym_name}, random actions",
             "rlpar_env": f"raw, rlpar's env ({type(rlpar_env).__name__}), random actions",
             **{acting: f"rlpar parallel=local sampler, model.acting={acting}" for acting in ACTING}}
    print(f"{args.env}, {args.num_envs} environments, {args.rounds} alternating rounds of {args.rollout_length} steps; "
          f"median and best (least disturbed) round of each side; us: per step of all {args.num_envs} environments")
    print(f"load at the end: {os.getloadavg()[0]:.2f}")
    rows = []
    for pick in (statistics.median, max):
        rate = {name: pick(values) for name, values in rates.items()}
        rows += [[name, pick.__name__.replace("max", "best"), f"{rate[side]:,.0f}", f"{1e6 * args.num_envs / rate[side]:.0f}",
                  f"{rate[side] / rate['gymnasium']:.0%}", f"{rate[side] / rate['rlpar_env']:.0%}"]
                 for side, name in names.items()]
    print(markdown_table(["side", "round", "env steps/s", "us per step", "of Gymnasium's", "of rlpar's env"], rows))

if __name__ == "__main__":
    main()
