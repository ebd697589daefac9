"""When central inference (parallel.inference=central) beats worker-side inference: sampling
throughput, in env steps per second, of the same run with each, over network sizes, observation
sizes and worker counts.

    .venv/bin/python benchmarks/central_inference.py            # the table in docs/benchmarks.md
    .venv/bin/python benchmarks/central_inference.py --quick    # two rows

Each measurement is a fresh process: build the run, sample 3 warm-up rounds with fixed weights,
then time `--rounds` rounds of sampling alone (no learning, so only acting differs), with the
server on numpy (float64, the workers' own maths) and on torch (float32). PPO's
blocking rounds, rollouts of 32 steps, CartPole-v1 (4 floats) or 84x84 frames
(benchmarks/frames_env.py, 7,056 floats).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def trainer_probe(body: str) -> str:
    """A script run as `python -c SCRIPT COUNT OVERRIDES...`: it builds the run of OVERRIDES in a
    temporary directory, runs `body` (indented 8, with `algorithm` and `count` defined, printing
    one JSON line), and closes the run."""
    return f"""
import json, sys, tempfile, time
from rlpar.config.compose import compose_config
from rlpar.runtime.build import build_trainer
count = int(sys.argv[1])
with tempfile.TemporaryDirectory() as run_dir:
    trainer = build_trainer(compose_config(sys.argv[2:], run_dir=run_dir), progress=False)
    try:
        algorithm = trainer.algorithm
{body}
    finally:
        trainer.close()
"""


PROBE = trainer_probe("""
        sampler, weights = algorithm.sampler, algorithm.get_weights()
        for _ in range(3):
            sampler.sample(weights, 0)
            sampler.metrics()
        steps, batch_rows, batches = 0, 0.0, 0
        began = time.perf_counter()
        for _ in range(count):
            steps += sampler.sample(weights, 0).num_steps
            metrics = sampler.metrics()
            batches += metrics.get("inference_batches", 0)
            batch_rows += metrics.get("inference_batches", 0) * metrics.get("inference_batch_mean", 0.0)
        elapsed = time.perf_counter() - began
        print(json.dumps({"steps_per_s": steps / elapsed, "batch_mean": batch_rows / batches if batches else None}))
""")

OBSERVATIONS = {
    "cartpole": ("env=cartpole",),
    "frames84": ("env.id=null", "env.entry_point=benchmarks.frames_env:FramesEnv", "env.max_episode_steps=null"),
}
# (observations, hidden sizes, parallel, workers, environments per worker)
FULL = [
    ("cartpole", "[64,64]", "multiprocess", 2, 4),
    ("cartpole", "[64,64]", "multiprocess", 8, 4),
    ("cartpole", "[64,64]", "distributed", 4, 2),
    ("cartpole", "[1024,1024]", "multiprocess", 2, 4),
    ("cartpole", "[1024,1024]", "multiprocess", 8, 4),
    ("frames84", "[256,256]", "multiprocess", 2, 4),
    ("frames84", "[256,256]", "multiprocess", 8, 4),
    ("frames84", "[256,256]", "distributed", 4, 2),
]
QUICK = [FULL[0], FULL[5]]


def measure(rounds: int, *overrides: str) -> dict:
    import json

    out = subprocess.run([sys.executable, "-c", PROBE, str(rounds), *overrides, "checkpoint.every=0",
                          "algo.rollout_length=32", "algo.minibatch_size=32"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu", help="hardware group: cpu, or gpu (the torch column on CUDA)")
    args = parser.parse_args()
    print("| observations | hidden | parallel | workers x envs | worker-side steps/s | central (numpy) steps/s | "
          "central (torch) steps/s | best central / worker | central batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for obs, hidden, parallel, workers, envs in (QUICK if args.quick else FULL):
        common = (*OBSERVATIONS[obs], f"model.hidden_sizes={hidden}", f"parallel={parallel}", f"workers={workers}",
                  f"envs_per_worker={envs}", f"hardware={args.device}")
        worker = measure(args.rounds, *common, "parallel.inference=worker")
        central = measure(args.rounds, *common, "parallel.inference=central", "parallel.inference_backend=numpy")
        torch_central = measure(args.rounds, *common, "parallel.inference=central", "parallel.inference_backend=torch")
        best = max(central["steps_per_s"], torch_central["steps_per_s"])
        print(f"| {obs} | {hidden} | {parallel} | {workers} x {envs} | {worker['steps_per_s']:,.0f} | "
              f"{central['steps_per_s']:,.0f} | {torch_central['steps_per_s']:,.0f} | "
              f"{best / worker['steps_per_s']:.2f} | {central['batch_mean']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
