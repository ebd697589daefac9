"""Env steps per second of each parallel mode, training included, and of the sampler alone.

    .venv/bin/python benchmarks/throughput.py scaling            # workers 1..16 x 3 modes
    .venv/bin/python benchmarks/throughput.py table [SEEDS...]   # the seed design's Pendulum table
    .venv/bin/python benchmarks/throughput.py apex [SEED]        # Ape-X on CartPole, workers 1..16

`fps` is env steps over the wall-clock of training (sampling, transfer, learning, weight sync;
not process start-up); `sampler fps` is env steps over the time spent sampling only.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("local", "multiprocess", "distributed")


def run(overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "main.py", *overrides, "progress=false", "checkpoint.every=0", f"hydra.run.dir={tmp}"],
            cwd=ROOT, capture_output=True, text=True,
        )
        process_s = time.perf_counter() - start
        if proc.returncode != 0:
            return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    sample_s = sum(r["time_sample_s"] + r.get("time_transfer_s", 0.0) for r in rows)
    solved = next((r for r in rows if (r["episode_return_mean"] or float("-inf")) >= 475), None)
    return {
        "steps_to_475": solved and solved["env_steps"],
        "s_to_475": solved and solved["wall_time_s"],
        "replay_shards": last.get("replay_shards"),
        "fps": last["env_steps"] / last["wall_time_s"],
        "sampler_fps": last["env_steps"] / sample_s,
        "return": last["episode_return_mean"],
        "steps": last["env_steps"],
        "process_s": process_s,
    }


def scaling(total_steps: int = 32768) -> None:
    print("| mode | workers | envs | fps (training incl.) | sampler fps | process s |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        for workers in (1, 2, 4, 8, 16):
            result = run([
                "env=pendulum", f"parallel={mode}", f"workers={workers}", "envs_per_worker=4",
                "algo.rollout_length=256", f"total_steps={total_steps}", "algo.minibatch_size=512",
            ])
            if "error" in result:
                print(f"| {mode} | {workers} | {4 * workers} | failed: {result['error']} | | |", flush=True)
                continue
            print(f"| {mode} | {workers} | {4 * workers} | {result['fps']:,.0f} | {result['sampler_fps']:,.0f} | "
                  f"{result['process_s']:.1f} |", flush=True)


def table(seeds=(0, 1, 2)) -> None:
    """Pendulum-v1, 10 epochs, minibatch 64 (size), as in the seed design's table."""
    rows = {
        "standard PPO, 1 env": ["parallel=local", "workers=1", "envs_per_worker=1", "algo.rollout_length=2048"],
        "multiprocess, 8 envs": ["parallel=multiprocess", "workers=8", "envs_per_worker=1", "algo.rollout_length=2048"],
        "distributed, 16 workers": ["parallel=distributed", "workers=16", "envs_per_worker=1", "algo.rollout_length=512"],
    }
    common = ["env=pendulum", "algo.epochs=10", "algo.minibatch_size=64", "algo.lr=1e-3", "algo.anneal_lr=false",
              "total_steps=200000"]
    print("| row | seed | fps (training incl.) | sampler fps | final return | process s |")
    print("|---|---|---|---|---|---|")
    for name, overrides in rows.items():
        for seed in seeds:
            r = run([*common, *overrides, f"seed={seed}"])
            if "error" in r:
                print(f"| {name} | {seed} | failed: {r['error']} | | | |", flush=True)
                continue
            print(f"| {name} | {seed} | {r['fps']:,.0f} | {r['sampler_fps']:,.0f} | {r['return']:.1f} | "
                  f"{r['process_s']:.1f} |", flush=True)


def apex(seed: int = 0, total_steps: int = 100_000) -> None:
    """Ape-X's CartPole preset (8 environments in all, split over the workers; 2 replay shards)
    on Ray actors: throughput and time to a mean return of 475 against the number of actors."""
    print("| workers | envs | fps (training incl.) | sampler fps | steps to 475 | s to 475 | replay shards | process s |")
    print("|---|---|---|---|---|---|---|---|")
    for workers in (1, 2, 4, 8, 16):
        r = run(["algo=apex", "parallel=distributed", f"workers={workers}", f"seed={seed}", f"total_steps={total_steps}"])
        if "error" in r:
            print(f"| {workers} | | failed: {r['error']} | | | | | |", flush=True)
            continue
        envs = workers * -(-8 // workers)
        print(f"| {workers} | {envs} | {r['fps']:,.0f} | {r['sampler_fps']:,.0f} | {r['steps_to_475'] or 'not reached'} | "
              f"{r['s_to_475'] or 'not reached'} | {r['replay_shards']} | {r['process_s']:.1f} |", flush=True)


if __name__ == "__main__":
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {platform.machine()}, python {platform.python_version()}")
    mode = sys.argv[1] if len(sys.argv) > 1 else "scaling"
    if mode == "table":
        table(tuple(int(s) for s in sys.argv[2:]) or (0, 1, 2))
    elif mode == "apex":
        apex(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        scaling()
