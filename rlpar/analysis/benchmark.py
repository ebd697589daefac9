"""The benchmark table (`experiment=benchmark`): rlpar's final deterministic evaluations, over seeds,
beside RL Baselines3 Zoo's published figures, CleanRL's for Atari (rlpar/analysis/rl_zoo.py).

A row is one (algorithm, environment, parallel mode, workers); its seeds are the repetitions. Each
seed's figure is its own final evaluation: `eval_episodes` episodes of the deterministic policy on
fresh environments, which the run appends to `evaluations.jsonl` (`source: training`); a run
trained without one can be given one afterwards with `rlpar evaluate RUN_DIR --episodes 20`, whose
row is used when it evaluated the run's final env steps.

Beside the final figure, each row says how fast it got there: per seed, the training wall time
(`wall_time_s` of metrics.jsonl) at which the training return (`episode_return_mean`) first
reached the reference's bar (its figure minus one std); the mean over the seeds that reached it,
how many of how many did; and the same of the PPO row of the same environment in the sweep, timed
to this row's bar (the same score), so that every algorithm is set beside PPO's time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

import rlpar.analysis.rl_zoo as rl_zoo
from rlpar.analysis.runs import Run

BENCHMARK = "benchmark"  # experiment_name of conf/experiment/benchmark.yaml
EVALUATIONS_FILE = "evaluations.jsonl"  # rlpar.runtime.evaluate_run.EVALUATIONS_FILE (analysis reads files only)
TRAINING = "training"  # `source` of the row a run's own final evaluation writes

# Rows in the order of RL-Zoo's table here: classic control, Box2D, MuJoCo; RL-Zoo's algorithms,
# then those compared with another's row.
ALGO_ORDER = ("ppo", "a2c", "dqn", "sac", "td3", "impala", "appo", "apex", "apex_sac", "apex_td3")
_ENV_ORDER = {env: index for index, env in enumerate(dict.fromkeys(row.env for row in rl_zoo.REFERENCE_ROWS))}
PPO = "ppo"  # the algorithm whose time to each row's bar is set beside the row's

COLUMNS = (
    "algo",
    "env",
    "mode",
    "workers",
    "seeds",
    "eval_return_mean",
    "eval_return_std",
    "eval_episodes",
    "eval_return_per_seed",
    "rl_zoo_algo",
    "rl_zoo_env",
    "rl_zoo_mean",
    "rl_zoo_std",
    "rl_zoo_budget",
    "ratio",
    "reached_rl_zoo_minus_std",
    "env_steps_mean",
    "wall_time_s_mean",
    "curve",
    "reference_source",
    "time_to_bar_s_mean",
    "time_to_bar_seeds",
    "ppo_time_to_bar_s_mean",
    "ppo_time_to_bar_seeds",
)


def is_benchmark(runs: list[Run]) -> bool:
    """Whether the runs come from `experiment=benchmark` (or a run of one of its rows with it)."""
    return any(run.config.get("experiment_name") == BENCHMARK for run in runs)


def algo_name(run: Run) -> str:
    return str((run.config.get("algo") or {}).get("name", "unknown algo"))


def read_evaluations(run_dir: Path) -> list[dict]:
    """The rows of a run's evaluations.jsonl ([] without one; a line cut short ends it)."""
    rows = []
    path = Path(run_dir) / EVALUATIONS_FILE
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return rows


def final_evaluation(run: Run) -> dict | None:
    """The run's own final evaluation (the newest `source: training` row), else the newest `rlpar
    evaluate` row of its final env steps, else None."""
    rows = read_evaluations(run.path)
    own = [row for row in rows if row.get("source") == TRAINING and row.get("eval_return_mean") is not None]
    if own:
        return own[-1]
    final_steps = run.final.get("env_steps")
    later = [
        row
        for row in rows
        if row.get("source") != TRAINING
        and row.get("eval_return_mean") is not None
        and final_steps is not None
        and row.get("env_steps") == final_steps
    ]
    return later[-1] if later else None


def row_key(run: Run) -> tuple:
    return algo_name(run), run.env_id, run.mode, run.workers


def _order(key: tuple) -> tuple:
    algo, env, mode, workers = key
    zoo_env = rl_zoo.zoo_env(env)
    return (
        _ENV_ORDER.get(zoo_env or "", len(_ENV_ORDER)),
        env,
        ALGO_ORDER.index(algo) if algo in ALGO_ORDER else len(ALGO_ORDER),
        algo,
        mode != "local",
        mode,
        workers,
    )


def group_rows(runs: list[Run]) -> dict[tuple, list[tuple[Run, dict]]]:
    """Finished runs that have a final evaluation, with it, by (algo, env, mode, workers), in table order."""
    groups: dict[tuple, list[tuple[Run, dict]]] = defaultdict(list)
    for run in runs:
        if run.status != "finished":
            continue
        evaluation = final_evaluation(run)
        if evaluation is not None:
            groups[row_key(run)].append((run, evaluation))
    return dict(sorted(groups.items(), key=lambda item: _order(item[0])))


def not_included(runs: list[Run]) -> list[tuple[Run, str]]:
    """Runs left out of the table, with why: unfinished, crashed, or finished without a final evaluation."""
    left = []
    for run in runs:
        if run.status != "finished":
            left.append((run, run.status))
        elif final_evaluation(run) is None:
            left.append((run, "no final evaluation (eval_episodes=0; rlpar evaluate RUN_DIR --episodes 20 adds one)"))
    return left


def reached(mean: float | None, zoo: rl_zoo.ZooRow | None) -> bool | None:
    """The issue's bar: rlpar's mean over seeds at least RL-Zoo's figure minus one RL-Zoo std."""
    if mean is None or zoo is None:
        return None
    return mean >= zoo.bar


def curve_name(key: tuple) -> str:
    """The file name of a row's learning-curve plot: `<algo>-<env>[-<mode>-<N>w].png`."""
    algo, env, mode, workers = key
    name = f"{algo}-{env}" if mode == "local" and workers == 1 else f"{algo}-{env}-{mode}-{workers}w"
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) + ".png"


def time_to_bar(run: Run, bar: float) -> float | None:
    """The training wall time at which the run's training return first reached `bar`, or None."""
    first = run.first_reaching(bar)
    return None if first is None or first.get("wall_time_s") is None else float(first["wall_time_s"])


def times_to_bar(runs: list[Run], bar: float | None) -> tuple[float | None, str | None]:
    """The mean time to `bar` over the runs that reached it, and `<reached>/<runs>`; (None, None) without a bar."""
    if bar is None:
        return None, None
    times = [seconds for run in runs if (seconds := time_to_bar(run, bar)) is not None]
    return (float(np.mean(times)) if times else None), f"{len(times)}/{len(runs)}"


def benchmark_rows(runs: list[Run]) -> list[dict]:
    """One row per (algo, env, mode, workers): rlpar's evaluation over seeds, RL-Zoo's row, the ratio,
    whether RL-Zoo's figure minus one std was reached, env steps and training wall time (means over
    seeds), the time to that bar and PPO's time to it (the module's docstring). The std over seeds is
    numpy's (ddof 0), as the other reports'."""
    rows = []
    groups = group_rows(runs)
    ppo_runs: dict[str, list[Run]] = {}  # env -> the runs of its first PPO row, in table order
    for (algo, env, _, _), members in groups.items():
        if algo == PPO and env not in ppo_runs:
            ppo_runs[env] = [run for run, _ in members]
    for key, members in groups.items():
        algo, env, mode, workers = key
        values = [float(evaluation["eval_return_mean"]) for _, evaluation in members]
        mean, std = float(np.mean(values)), float(np.std(values))
        zoo = rl_zoo.reference(algo, env)
        episodes = sorted({int(evaluation.get("eval_episodes", 0)) for _, evaluation in members})
        wall = [seconds for run, _ in members if (seconds := run.final.get("wall_time_s")) is not None]
        ratio = rl_zoo.ratio(mean, zoo.mean) if zoo else None
        hit = reached(mean, zoo)
        bar = zoo.bar if zoo else None
        time_mean, time_seeds = times_to_bar([run for run, _ in members], bar)
        ppo_time_mean, ppo_time_seeds = times_to_bar(ppo_runs[env], bar) if env in ppo_runs else (None, None)
        rows.append(
            {
                "algo": algo,
                "env": env,
                "mode": mode,
                "workers": workers,
                "seeds": len(members),
                "eval_return_mean": mean,
                "eval_return_std": std,
                "eval_episodes": "/".join(str(e) for e in episodes),
                "eval_return_per_seed": " ".join(
                    f"s{run.seed}:{value:.1f}" for (run, _), value in zip(members, values)
                ),
                "rl_zoo_algo": zoo.algo if zoo else None,
                "rl_zoo_env": zoo.env if zoo else None,
                "rl_zoo_mean": zoo.mean if zoo else None,
                "rl_zoo_std": zoo.std if zoo else None,
                "rl_zoo_budget": zoo.n_timesteps if zoo else None,
                "ratio": ratio,
                "reached_rl_zoo_minus_std": None if hit is None else ("yes" if hit else "no"),
                "env_steps_mean": float(np.mean([run.final["env_steps"] for run, _ in members])),
                "wall_time_s_mean": float(np.mean(wall)) if wall else None,
                "curve": f"curves/{curve_name(key)}",
                "reference_source": zoo.source if zoo else None,
                "time_to_bar_s_mean": time_mean,
                "time_to_bar_seeds": time_seeds,
                "ppo_time_to_bar_s_mean": ppo_time_mean,
                "ppo_time_to_bar_seeds": ppo_time_seeds,
            }
        )
    return rows
