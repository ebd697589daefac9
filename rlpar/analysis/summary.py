"""Tables and curves over runs: the same functions feed `python -m rlpar.report` and the notebooks."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from rlpar.analysis.runs import THRESHOLDS, Run


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
    """One row per group: FPS, final return and time/steps to the return threshold, over seeds."""
    thresholds = {**THRESHOLDS, **(thresholds or {})}
    rows = []
    for (env_id, mode, workers, num_envs), members in group_runs(runs).items():
        threshold = thresholds.get(env_id)
        reached = [r.first_reaching(threshold) for r in members]
        fps_mean, fps_std = _mean_std([r.fps for r in members])
        ret_mean, ret_std = _mean_std([r.final.get("episode_return_mean") for r in members])
        rows.append({
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
            "reached": sum(r is not None for r in reached),
            "steps_to_threshold_mean": _mean_std([r["env_steps"] if r else None for r in reached])[0],
            "seconds_to_threshold_mean": _mean_std([r["wall_time_s"] if r else None for r in reached])[0],
        })
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
    """Mean and std of `episode_return_mean` over seeds on a common grid of `x` (env_steps or wall_time_s)."""
    curves = []
    for run in members:
        rows = [r for r in run.metrics if r.get("episode_return_mean") is not None]
        if rows:
            curves.append((np.array([r[x] for r in rows], float), np.array([r["episode_return_mean"] for r in rows], float)))
    if not curves:
        return None
    end = min(c[0][-1] for c in curves)
    start = max(c[0][0] for c in curves)
    grid = np.linspace(start, end, points) if end > start else np.array([end])
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, values.mean(0), values.std(0)
