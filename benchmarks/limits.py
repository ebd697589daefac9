"""How far each part of the pipeline stands from the physical limit, per environment:

1. the raw environment step rate of one core (one Gymnasium env, random actions; and the vector
   env rlpar builds for 8 environments);
2. each sampler's env steps/s with fixed weights (acting included, no learning), and that as a
   fraction of the raw rate times the cores it may use;
3. the learner's samples/s (samples x epochs per second of PPO's update, the median of 20), eager
   and compiled;
4. each phase's share of a training iteration (PPO preset, from metrics.jsonl).

    .venv/bin/python benchmarks/limits.py                      # CartPole-v1 and Pendulum-v1
    .venv/bin/python benchmarks/limits.py --envs cartpole --rounds 10

Each measurement that builds a run is a fresh process; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from central_inference import PROBE as SAMPLER  # sampling alone with fixed weights (steps_per_s)
from central_inference import trainer_probe

ROOT = Path(__file__).resolve().parents[1]
ENVS = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}

RAW = """
import json, sys, time
import gymnasium as gym, numpy as np
from rlpar.envs.factory import make_vector_env, resolve_env_spec
env_id, seconds = sys.argv[1], float(sys.argv[2])
env = gym.make(env_id); env.reset(seed=0); steps, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    _, _, term, trunc, _ = env.step(env.action_space.sample()); steps += 1
    if term or trunc: env.reset()
single = steps / (time.perf_counter() - start)
venv = make_vector_env(resolve_env_spec(id=env_id), 8); venv.reset(seed=0); steps, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    venv.step(venv.action_space.sample()); steps += 8
print(json.dumps({"single": single, "vector8": steps / (time.perf_counter() - start)}))
"""

LEARNER = trainer_probe("""
        batch = algorithm.sampler.sample(algorithm.get_weights(), 0).copy()
        algorithm.gradient_step.wait_compiled()  # compile at first use, here (a run steps eagerly until a child has warmed the cache)
        algorithm.update(batch)  # warm-up (and the compile, if any)
        rates = []
        for _ in range(count):  # the median update: a compiled learner pauses once (~0.2 s) early on
            start = time.perf_counter()
            stats = algorithm.update(batch)
            samples = stats["gradient_steps"] * min(algorithm.minibatch_size, int(batch.valid.sum()))
            rates.append(samples / (time.perf_counter() - start))
        print(json.dumps({"samples_per_s": sorted(rates)[len(rates) // 2]}))
""")

PHASES = ("time_sample_s", "time_transfer_s", "time_weight_sync_s", "time_learn_s")


def python(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return json.loads(out.strip().splitlines()[-1])


def phase_shares(env: str, parallel: tuple[str, ...]) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as run_dir:
        subprocess.run([sys.executable, "main.py", f"env={env}", *parallel, "total_steps=30000", "progress=false",
                        "checkpoint.every=0", f"run_dir={run_dir}"], cwd=ROOT, check=True, capture_output=True)
        rows = [json.loads(line) for line in Path(run_dir, "metrics.jsonl").read_text().splitlines()][1:]
    total = sum(r["time_iteration_s"] for r in rows)
    return {phase: sum(r.get(phase, 0.0) for r in rows) / total for phase in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="*", default=list(ENVS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    cores = os.cpu_count()
    modes = {"local (8 envs)": ("workers=1", "envs_per_worker=8"),
             "multiprocess (2 x 4)": ("parallel=multiprocess", "workers=2", "envs_per_worker=4"),
             "distributed (2 x 4)": ("parallel=distributed", "workers=2", "envs_per_worker=4")}
    for env in args.envs:
        raw = python(RAW, ENVS[env], str(args.seconds))
        print(f"\n### {ENVS[env]}: raw env steps/s on one core: {raw['single']:,.0f} (one env), "
              f"{raw['vector8']:,.0f} (rlpar's vector env of 8)", flush=True)
        print("\n| sampler | env steps/s (acting, no learning) | of one core's vector rate | of all cores' |")
        print("|---|---|---|---|")
        for name, overrides in modes.items():
            rate = python(SAMPLER, str(args.rounds), f"env={env}", *overrides, "algo.rollout_length=64")["steps_per_s"]
            print(f"| {name} | {rate:,.0f} | {rate / raw['vector8']:.0%} | {rate / (raw['vector8'] * cores):.0%} |",
                  flush=True)
        print("\n| learner (PPO preset update) | samples/s eager | samples/s compiled |")
        print("|---|---|---|")
        eager = python(LEARNER, "20", f"env={env}", "algo.compile=false")["samples_per_s"]
        compiled = python(LEARNER, "20", f"env={env}", "algo.compile=true")["samples_per_s"]
        print(f"| {ENVS[env]} | {eager:,.0f} | {compiled:,.0f} |", flush=True)
        print("\n| mode (PPO preset, 30k steps) | sample | transfer | weight sync | learn |")
        print("|---|---|---|---|---|")
        for name, overrides in modes.items():
            shares = phase_shares(env, overrides)
            print(f"| {name} | " + " | ".join(f"{shares[p]:.0%}" for p in PHASES) + " |", flush=True)


if __name__ == "__main__":
    main()
