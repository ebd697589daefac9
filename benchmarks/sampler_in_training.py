"""Sampling inside a training run against raw vector-env steps, on the same machine at the same time.

The training side is `main.py` as a user runs it (by default `workers=1 envs_per_worker=64
model.acting=numpy32 total_steps=300000`, CartPole-v1): its sampling rate is the env steps of
iterations 2 on over their summed `time_sample_s` (metrics.jsonl; the first iteration holds the
warm-up). The raw side is Gymnasium's `gym.make_vec(ID, N, vectorization_mode="vector_entry_point")`
stepped with random actions (`action_space.sample()` each step), as in benchmarks/sampler_vs_raw.py,
timed in this process right before and right after each training run, so that both see the same
machine state (this machine is shared: its speed drifts). The figure is the training run's rate
over the mean of the raw rates around it (and, stricter, over the faster of the two).

`--in-process` adds a second figure from one process: the same config trained by the Trainer
main.py builds, and after each of its iterations, once the learner has stepped, the raw env
stepped as many env steps as a rollout takes, timed. Both sides then start from the state the
learner's step leaves the caches in; the raw one is warm in the first figure.

    .venv/bin/python benchmarks/sampler_in_training.py                     # the issue's command, once
    .venv/bin/python benchmarks/sampler_in_training.py --runs 3            # three runs, raw before and after each
    .venv/bin/python benchmarks/sampler_in_training.py --in-process        # also raw env steps between iterations
    .venv/bin/python benchmarks/sampler_in_training.py model.acting=numpy total_steps=100000   # other overrides
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as rlpar sets it (--in-process trains here)

import gymnasium as gym  # noqa: E402
from common import machine, markdown_table, run_main  # noqa: E402  # also puts this clone's rlpar on the path

DEFAULT_OVERRIDES = ["workers=1", "envs_per_worker=64", "model.acting=numpy32", "total_steps=300000"]
FIRST_MEASURED_ITERATION = 2  # the first iteration holds the warm-up


def raw_rate(venv: gym.vector.VectorEnv, steps: int, rounds: int) -> float:
    """Env steps/s of `venv` with random actions drawn from its action space each step: the
    median of `rounds` rounds of `steps` steps."""
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            venv.step(venv.action_space.sample())
        rates.append(steps * venv.num_envs / (time.perf_counter() - start))
    return statistics.median(rates)


def sampling_rate(rows: list[dict], first_iteration: int = FIRST_MEASURED_ITERATION) -> tuple[int, float]:
    """The env steps of iterations `first_iteration` on and their summed `time_sample_s`, from a
    run's metrics rows (each row's `env_steps` is the running total)."""
    before = [row["env_steps"] for row in rows if row["iteration"] < first_iteration]
    measured = [row for row in rows if row["iteration"] >= first_iteration]
    if not measured:
        raise ValueError(f"the run logged no iteration from {first_iteration} on")
    steps = measured[-1]["env_steps"] - (before[-1] if before else 0)
    return steps, sum(row["time_sample_s"] for row in measured)


def interleaved(overrides: list[str], venv: gym.vector.VectorEnv) -> tuple[float, float]:
    """In this process: the Trainer of `overrides` trained to its end, and after each iteration
    `venv` stepped for a rollout's env steps with random actions. Sampling's rate (iterations 2 on,
    `time_sample_s`) and the raw env's (after iterations 2 on)."""
    from rlpar.config.compose import compose_config
    from rlpar.runtime.build import build_trainer

    steps = sample_s = raw_steps = raw_s = 0.0
    with tempfile.TemporaryDirectory(prefix="rlpar_sampler_in_training_") as tmp:
        trainer = build_trainer(compose_config([*overrides, "progress=false"], run_dir=f"{tmp}/run"))
        try:
            rollout_steps = trainer.algorithm.sampler.rollout_length
            while not trainer.done:
                before = trainer.env_steps
                metrics = trainer.train()
                start = time.perf_counter()
                for _ in range(rollout_steps):
                    venv.step(venv.action_space.sample())
                if metrics["iteration"] >= FIRST_MEASURED_ITERATION:
                    raw_s += time.perf_counter() - start
                    raw_steps += rollout_steps * venv.num_envs
                    steps += trainer.env_steps - before
                    sample_s += metrics["time_sample_s"]
        finally:
            trainer.close()
    return steps / sample_s, raw_steps / raw_s


def option(overrides: list[str], key: str) -> str | None:
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == key]
    return values[-1] if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="main.py overrides, after the defaults (key=value)")
    parser.add_argument("--runs", type=int, default=1, help="training runs, each between two raw measurements")
    parser.add_argument("--raw-rounds", type=int, default=30, help="rounds of --raw-steps steps per raw measurement")
    parser.add_argument("--raw-steps", type=int, default=128, help="steps per raw round (a rollout's length)")
    parser.add_argument("--in-process", action="store_true", help="also the interleaved figure (see above)")
    args = parser.parse_args()
    overrides = [*DEFAULT_OVERRIDES, *args.overrides, "checkpoint.every=0"]
    env_id = option(overrides, "env.id") or "CartPole-v1"
    num_envs = int(option(overrides, "workers") or 1) * int(option(overrides, "envs_per_worker") or 8)
    print(machine())
    venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    venv.reset(seed=0)
    raw_rate(venv, args.raw_steps, 3)  # warm-up
    raws = [raw_rate(venv, args.raw_steps, args.raw_rounds)]
    rows, ratios, strict = [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="rlpar_sampler_in_training_") as tmp:
            done, metrics = run_main(overrides, Path(tmp) / "run")
        if done.returncode != 0:
            sys.exit(f"main.py {' '.join(overrides)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        raws.append(raw_rate(venv, args.raw_steps, args.raw_rounds))
        steps, sample_s = sampling_rate(metrics)
        rate = steps / sample_s
        ratios.append(rate / statistics.mean(raws[-2:]))
        strict.append(rate / max(raws[-2:]))  # a disturbed raw measurement does not flatter the sampler
        row = [run + 1, f"{raws[-2]:,.0f}", f"{raws[-1]:,.0f}", f"{rate:,.0f}", f"{steps:,}", f"{sample_s:.4g}"]
        rows.append([*row, f"{ratios[-1]:.1%}", f"{strict[-1]:.1%}"])
    print(f"{env_id}, {num_envs} environments; main.py {' '.join(overrides)}")
    print(
        f"training: env steps of iterations {FIRST_MEASURED_ITERATION} on / their summed time_sample_s; raw: "
        f'gym.make_vec("{env_id}", {num_envs}, vectorization_mode="vector_entry_point"), random actions, '
        f"median of {args.raw_rounds} rounds of {args.raw_steps} steps, before and after each run"
    )
    header = ["run", "raw before, steps/s", "raw after, steps/s", "training sampling, steps/s", "env steps"]
    header += ["time_sample_s", "of raw (mean of before and after)", "of raw (the faster of the two)"]
    print(markdown_table(header, rows))
    print(
        f"RESULT sampling in training / raw Gymnasium: median {statistics.median(ratios):.1%} of the mean raw rate, "
        f"{statistics.median(strict):.1%} of the faster (runs: {', '.join(f'{r:.1%}' for r in ratios)}; "
        f"{', '.join(f'{r:.1%}' for r in strict)})"
    )
    if args.in_process:
        sampling, raw = interleaved(overrides, venv)
        print(
            f"RESULT in one process, the raw env stepped after each iteration: sampling {sampling:,.0f} steps/s, "
            f"raw {raw:,.0f} steps/s: {sampling / raw:.1%}"
        )


if __name__ == "__main__":
    main()
