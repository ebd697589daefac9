"""Tables and curves over runs: the same functions feed `python -m rlpar.report` and the notebooks."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from rlpar.analysis.runs import Run, return_threshold


def _mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return float(np.mean(values)), float(np.std(values))


def group_runs(runs: list[Run]) -> dict[tuple, list[Run]]:
    """Finished runs grouped by (env, mode, workers, environments): seeds are the repetitions."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if run.status == "finished":
            groups[(run.env_id, run.mode, run.workers, run.num_envs)].append(run)
    return dict(sorted(groups.items(), key=lambda item: (item[0][0], item[0][1], item[0][2], item[0][3])))


def summary_rows(runs: list[Run], thresholds: dict[str, float] | None = None) -> list[dict]:
    """One row per group: FPS, final return and time/steps to the return threshold, over seeds.

    `thresholds` overrides the return threshold per env (see runs.return_threshold for the defaults)."""
    groups = group_runs(runs)
    runs_of_env: defaultdict[str, list] = defaultdict(list)
    for (env_id, *_), members in groups.items():
        runs_of_env[env_id] += members
    rows = []
    for (env_id, mode, workers, num_envs), members in groups.items():
        threshold, source = return_threshold(env_id, runs_of_env[env_id], thresholds)
        reached = [r.first_reaching(threshold) for r in members]
        fps_mean, fps_std = _mean_std([r.fps for r in members])
        ret_mean, ret_std = _mean_std([r.final.get("episode_return_mean") for r in members])
        rows.append(
            {
                "env": env_id,
                "mode": mode,
                "workers": workers,
                "envs": num_envs,
                "seeds": len(members),
                "fps_mean": fps_mean,
                "fps_std": fps_std,
                "final_return_mean": ret_mean,
                "final_return_std": ret_std,
                "threshold": threshold,
                "threshold_source": source,
                "reached": sum(r is not None for r in reached),
                "steps_to_threshold_mean": _mean_std([r["env_steps"] if r else None for r in reached])[0],
                "seconds_to_threshold_mean": _mean_std([r["wall_time_s"] if r else None for r in reached])[0],
            }
        )
    return rows


def scaling_rows(rows: list[dict]) -> list[dict]:
    """Adds speed-up and parallel efficiency against the 1-worker row of the same env and mode."""
    base = {(r["env"], r["mode"]): r["fps_mean"] for r in rows if r["workers"] == 1}
    out = []
    for row in rows:
        reference = base.get((row["env"], row["mode"]))
        speedup = row["fps_mean"] / reference if reference and row["fps_mean"] else None
        out.append({**row, "speedup": speedup, "efficiency": speedup / row["workers"] if speedup else None})
    return out


def learning_curve(members: list[Run], x: str = "env_steps", points: int = 100):
    """Mean and std of `episode_return_mean` over seeds on a common grid of `x` (env_steps or wall_time_s).

    The grid spans every seed, from the earliest first point to the latest last one; at each x
    the mean is over the seeds that cover it. Seeds take different wall times for the same steps,
    so the curve goes on to the slowest seed's end instead of stopping at the fastest one's.
    """
    curves = []
    for run in members:
        rows = [r for r in run.metrics if r.get("episode_return_mean") is not None]
        if rows:
            curves.append(
                (np.array([r[x] for r in rows], float), np.array([r["episode_return_mean"] for r in rows], float))
            )
    if not curves:
        return None
    start = min(xs[0] for xs, _ in curves)
    end = max(xs[-1] for xs, _ in curves)
    grid = np.linspace(start, end, points) if end > start else np.array([end])
    values = np.full((len(curves), len(grid)), np.nan)
    for values_of_seed, (xs, ys) in zip(values, curves):
        covered = (grid >= xs[0]) & (grid <= xs[-1])
        values_of_seed[covered] = np.interp(grid[covered], xs, ys)
    covered = ~np.isnan(values).all(0)
    grid, values = grid[covered], values[:, covered]
    return grid, np.nanmean(values, 0), np.nanstd(values, 0)
