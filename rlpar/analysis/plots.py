"""PNG figures for a sweep (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rlpar.analysis.summary import group_runs, learning_curve  # noqa: E402


def plot_scaling(rows: list[dict], out_dir: Path) -> list[Path]:
    """FPS and parallel efficiency against workers, one line per (env, mode)."""
    written = []
    series: dict[tuple, list[dict]] = {}
    for row in rows:
        series.setdefault((row["env"], row["mode"]), []).append(row)
    if not any(len(points) > 1 for points in series.values()):
        return written
    for key, ylabel, name in (("fps_mean", "env steps / s (training included)", "fps_vs_workers.png"),
                              ("efficiency", "parallel efficiency (speed-up / workers)", "efficiency_vs_workers.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for (env, mode), points in sorted(series.items()):
            points = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["workers"])
            if not points:
                continue
            ys = [p[key] for p in points]
            errors = [p["fps_std"] or 0.0 for p in points] if key == "fps_mean" else None
            ax.errorbar([p["workers"] for p in points], ys, yerr=errors, marker="o", capsize=3, label=f"{mode} ({env})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({row["workers"] for row in rows}))
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
        if key == "efficiency":
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        written.append(_finish(fig, [ax], out_dir / name))
    return written


def plot_learning_curves(runs, out_dir: Path) -> list[Path]:
    """Return against env steps and against wall time, mean with a +-1 std band over seeds."""
    written = []
    groups = group_runs(runs)
    for x, label, name in (("env_steps", "env steps", "learning_curves_steps.png"),
                           ("wall_time_s", "training wall time (s)", "learning_curves_time.png")):
        envs = sorted({key[0] for key in groups})
        fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
        for ax, env in zip(axes[0], envs):
            for (env_id, mode, workers, num_envs), members in groups.items():
                if env_id != env:
                    continue
                curve = learning_curve(members, x=x)
                if curve is None:
                    continue
                grid, mean, std = curve
                line, = ax.plot(grid, mean, label=f"{mode}, {workers} workers, {num_envs} envs ({len(members)} seeds)")
                ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
            ax.set_title(env)
            ax.set_xlabel(label)
            ax.set_ylabel("mean return (last 20 episodes)")
        written.append(_finish(fig, axes[0], out_dir / name))
    return written


def _finish(fig, axes, path: Path) -> Path:
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
