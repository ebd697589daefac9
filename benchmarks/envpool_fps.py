"""`env.vectorization=envpool` against the default path (Gymnasium's AtariPreprocessing +
FrameStackObservation, stepped one by one in a SyncVectorEnv), alternating the two in one run.

Three levels, each printed as a table:
- raw: rlpar's vector env (`make_vector_env`) of N environments in this process, random actions,
  frames/s per core (one process, one EnvPool thread; Atari frames = agent steps x frame skip 4);
- sampler: one `parallel=local` rollout of the same N environments through rlpar's RolloutWorker
  (acting with the untrained CNN, no learning), as `benchmarks/sampler_vs_raw.py` measures it;
- runs: `python main.py OVERRIDES total_steps=S` with and without `env.vectorization=envpool`, in
  pairs whose order alternates; frames/s is rlpar's own, from the run's metrics.jsonl, over the
  second half of the run (start-up and the first iterations behind it) and over the whole run.

    .venv/bin/python benchmarks/envpool_fps.py                             # all three, Pong
    .venv/bin/python benchmarks/envpool_fps.py --levels runs --pairs 3 --steps 30000
    .venv/bin/python benchmarks/envpool_fps.py --levels raw --env Hopper-v5

The runs' default OVERRIDES are the bar `docs/benchmarks.md` quotes: env=atari env.id=ALE/Pong-v5
algo=impala parallel=distributed workers=4.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
from common import machine, markdown_table, run_main  # also puts this clone's rlpar on the path

from rlpar.config.compose import compose_config
from rlpar.envs.atari import frames_per_step
from rlpar.envs.factory import env_seeds, make_vector_env, resolve_env_spec

PATHS = ("default", "envpool")
RUN_OVERRIDES = ["env=atari", "env.id=ALE/Pong-v5", "algo=impala", "parallel=distributed", "workers=4"]


def env_overrides(env_id: str) -> list[str]:
    return ["env=atari", f"env.id={env_id}"] if env_id.startswith("ALE/") else [f"env.id={env_id}"]


def path_overrides(path: str) -> list[str]:
    return ["env.vectorization=envpool"] if path == "envpool" else []


def raw_rates(env_id: str, num_envs: int, steps: int, rounds: int) -> dict[str, list[float]]:
    """Frames/s of each path's vector env, random actions, alternating round by round."""
    venvs, frames = {}, 1
    for path in PATHS:
        cfg = compose_config([*env_overrides(env_id), *path_overrides(path)], run_dir="/tmp/unused")
        spec = resolve_env_spec(**cfg.env)
        frames = frames_per_step(spec)
        venvs[path] = make_vector_env(spec, num_envs)
        venvs[path].reset(seed=env_seeds(spec, num_envs, 0))
        venvs[path].action_space.seed(0)
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    try:
        for round_ in range(rounds + 1):  # round 0 warms up
            for path in PATHS if round_ % 2 == 0 else PATHS[::-1]:
                venv = venvs[path]
                start = time.perf_counter()
                for _ in range(steps):
                    venv.step(venv.action_space.sample())
                if round_:
                    rates[path].append(steps * num_envs * frames / (time.perf_counter() - start))
    finally:
        for venv in venvs.values():
            venv.close()
    return rates


def sampler_rates(env_id: str, num_envs: int, rollout_length: int, rounds: int) -> dict[str, list[float]]:
    """Frames/s of one parallel=local rollout (acting included, no learning), alternating."""
    from rlpar.runtime.build import build_trainer

    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    with TemporaryDirectory() as tmp:
        trainers = {}
        try:
            for path in PATHS:
                cfg = compose_config(["progress=false", "checkpoint.every=0", *env_overrides(env_id), *path_overrides(path),
                                      "parallel=local", "workers=1", f"envs_per_worker={num_envs}",
                                      f"algo.rollout_length={rollout_length}"], run_dir=f"{tmp}/{path}")
                trainers[path] = build_trainer(cfg)
            frames = frames_per_step(resolve_env_spec(**cfg.env))
            for round_ in range(rounds + 1):
                for path in PATHS if round_ % 2 == 0 else PATHS[::-1]:
                    algorithm = trainers[path].algorithm
                    start = time.perf_counter()
                    steps = algorithm.sampler.sample(algorithm.get_weights(), 0).num_steps
                    if round_:
                        rates[path].append(steps * frames / (time.perf_counter() - start))
        finally:
            for trainer in trainers.values():
                trainer.close()
    return rates


def run_rates(overrides: list[str], steps: int, pairs: int, timeout: float, keep: str | None) -> list[dict]:
    """`main.py` runs, default and envpool in alternating order; rlpar's logged frames/s."""
    results = []
    with TemporaryDirectory() as tmp:
        tmp = keep or tmp
        for pair in range(pairs):
            for path in PATHS if pair % 2 == 0 else PATHS[::-1]:
                run_dir = Path(tmp) / f"{pair}-{path}"
                started = time.perf_counter()
                done, rows = run_main([*overrides, *path_overrides(path), f"total_steps={steps}", "checkpoint.every=0"],
                                      run_dir, timeout=timeout)
                result = {"pair": pair, "path": path, "process_s": time.perf_counter() - started}
                if done.returncode != 0 or len(rows) < 2:
                    result["error"] = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
                else:
                    count = "frames" if "frames" in rows[-1] else "env_steps"
                    half, last = rows[len(rows) // 2], rows[-1]
                    result["second_half"] = (last[count] - half[count]) / (last["wall_time_s"] - half["wall_time_s"])
                    result["whole"] = last[count] / last["wall_time_s"]
                    result["learner_share"] = sum(r.get("time_learn_s", 0.0) for r in rows) / last["wall_time_s"]
                    result["actor_idle"] = statistics.mean(r.get("actor_idle_fraction", 0.0) for r in rows[len(rows) // 2:])
                results.append(result)
                print(f"  pair {pair} {path}: {fmt_run(result)}", flush=True)
    return results


def fmt_run(result: dict) -> str:
    if "error" in result:
        return f"error: {result['error']}"
    return (f"{result['second_half']:,.0f} frames/s (second half), {result['whole']:,.0f} whole run, learner busy "
            f"{result['learner_share']:.0%} of the run, actors idle {result['actor_idle']:.0%} (second half), "
            f"{result['process_s']:.0f} s in all")


def rate_table(title: str, rates: dict[str, list[float]]) -> str:
    median = {path: statistics.median(values) for path, values in rates.items()}
    rows = [[path, f"{median[path]:,.0f}", f"{min(rates[path]):,.0f}-{max(rates[path]):,.0f}",
             f"{median[path] / median['default']:.2f}x"] for path in PATHS]
    return f"{title}\n" + markdown_table(["path", "frames/s (median)", "range", "vs default"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", nargs="+", default=["raw", "sampler", "runs"], choices=["raw", "sampler", "runs"])
    parser.add_argument("--env", default="ALE/Pong-v5", help="raw and sampler levels: an Atari or MuJoCo id")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--raw-steps", type=int, default=200, help="steps of all environments per raw round")
    parser.add_argument("--rollout-length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--overrides", nargs="*", default=RUN_OVERRIDES, help="runs: main.py overrides")
    parser.add_argument("--steps", type=int, default=30_000, help="runs: total_steps (agent steps) each")
    parser.add_argument("--pairs", type=int, default=2, help="runs: default/envpool pairs, order alternating")
    parser.add_argument("--timeout", type=float, default=900, help="runs: seconds before one is given up")
    parser.add_argument("--keep", help="runs: keep the run directories under this directory")
    args = parser.parse_args()
    print(machine())
    if "raw" in args.levels:
        rates = raw_rates(args.env, args.num_envs, args.raw_steps, args.rounds)
        print(rate_table(f"raw: {args.env}, {args.num_envs} environments, random actions, one process "
                         f"({args.rounds} alternating rounds of {args.raw_steps} steps)", rates), flush=True)
    if "sampler" in args.levels:
        rates = sampler_rates(args.env, args.num_envs, args.rollout_length, args.rounds)
        print(rate_table(f"sampler: parallel=local rollouts of {args.rollout_length} steps x {args.num_envs} "
                         f"environments, acting included, no learning ({args.rounds} alternating rounds)", rates), flush=True)
    if "runs" in args.levels:
        print(f"runs: python main.py {' '.join(args.overrides)} total_steps={args.steps} [env.vectorization=envpool]")
        results = run_rates(args.overrides, args.steps, args.pairs, args.timeout, args.keep)
        rows, ratios = [], []
        for pair in range(args.pairs):
            by_path = {r["path"]: r for r in results if r["pair"] == pair}
            if any("error" in r for r in by_path.values()):
                continue
            ratio = by_path["envpool"]["second_half"] / by_path["default"]["second_half"]
            ratios.append(ratio)
            rows.append([pair, f"{by_path['default']['second_half']:,.0f}", f"{by_path['envpool']['second_half']:,.0f}",
                         f"{ratio:.2f}x", f"{by_path['envpool']['whole'] / by_path['default']['whole']:.2f}x"])
        print(markdown_table(["pair", "default frames/s", "envpool frames/s", "ratio (second half)", "ratio (whole run)"],
                             rows))
        if ratios:
            print(f"median ratio (second half): {float(np.median(ratios)):.2f}x over {len(ratios)} pairs")


if __name__ == "__main__":
    main()
