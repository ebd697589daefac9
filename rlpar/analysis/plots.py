"""PNG figures for a sweep (matplotlib, no display needed): one panel per environment, in a grid."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rlpar.analysis.runs import return_threshold  # noqa: E402
from rlpar.analysis.summary import group_runs, learning_curve  # noqa: E402

PANEL_INCHES = (4.6, 3.4)
SHADES = ("Blues", "Oranges", "Greens", "Reds", "Purples", "Greys")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def compact_number(value: float, _position=None) -> str:
    """Tick labels short enough not to run together: 500, 2.5k, 100k, 1.2M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def grid_shape(panels: int) -> tuple[int, int]:
    """(rows, columns): one row up to 3 panels, 2x2 for 4, 3 columns up to 9 panels, then 4."""
    if panels <= 3:
        columns = max(panels, 1)
    elif panels == 4:
        columns = 2
    else:
        columns = 3 if panels <= 9 else 4
    return math.ceil(max(panels, 1) / columns), columns


def group_colors(keys) -> dict:
    """A colour per (mode, workers, envs), the same in every panel: a hue per mode, darker with more workers."""
    modes = sorted({key[0] for key in keys})
    colors: dict[tuple, Any] = {}  # a matplotlib colour: a name or RGBA
    for index, mode in enumerate(modes):
        members = sorted(key for key in keys if key[0] == mode)
        if len(members) == 1:
            colors[members[0]] = f"C{index % 10}"
            continue
        shades = plt.get_cmap(SHADES[index % len(SHADES)])
        for rank, key in enumerate(members):
            colors[key] = shades(0.4 + 0.6 * rank / (len(members) - 1))
    return colors


def panel_grid(titles: list[str]):
    """A figure with one panel per title, row by row; the panels left over are hidden."""
    rows, columns = grid_shape(len(titles))
    fig, axes = plt.subplots(rows, columns, figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(titles) :]:
        ax.set_visible(False)
    for ax, title in zip(flat, titles):
        ax.set_title(title, fontsize=10)
    return fig, flat[: len(titles)], columns


def _label_axes(axes, columns: int, xlabel: str, ylabel: str) -> None:
    """x label under the lowest panel of each column, y label on the left column only."""
    for index, ax in enumerate(axes):
        if index + columns >= len(axes):
            ax.set_xlabel(xlabel)
        if index % columns == 0:
            ax.set_ylabel(ylabel)


def plot_scaling(rows: list[dict], out_dir: Path) -> list[Path]:
    """FPS and parallel efficiency against workers, a panel per env and a line per parallel mode."""
    written: list[Path] = []
    series: dict[tuple, list[dict]] = {}
    for row in rows:
        series.setdefault((row["env"], row["mode"]), []).append(row)
    if not any(len(points) > 1 for points in series.values()):
        return written
    envs = sorted({env for env, _ in series})
    worker_ticks = sorted({row["workers"] for row in rows})
    for key, ylabel, name in (
        ("fps_mean", "env steps / s (training included)", "fps_vs_workers.png"),
        ("efficiency", "parallel efficiency\n(speed-up / workers)", "efficiency_vs_workers.png"),
    ):
        fig, axes, columns = panel_grid(envs)
        colors = group_colors({(mode,) for _, mode in series})
        for ax, env in zip(axes, envs):
            for (series_env, mode), points in sorted(series.items()):
                points = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["workers"])
                if series_env != env or not points:
                    continue
                errors = [p["fps_std"] or 0.0 for p in points] if key == "fps_mean" else None
                ax.errorbar(
                    [p["workers"] for p in points],
                    [p[key] for p in points],
                    yerr=errors,
                    marker="o",
                    capsize=3,
                    label=mode,
                    color=colors[(mode,)],
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(worker_ticks)
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(compact_number))
            if key == "efficiency":
                ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        _label_axes(axes, columns, "workers", ylabel)
        written.append(_finish(fig, axes, out_dir / name))
    return written


def plot_learning_curves(runs, out_dir: Path, thresholds: dict[str, float] | None = None) -> list[Path]:
    """Return against env steps and against wall time: mean and +-1 std band over seeds, the threshold dashed.

    A panel per env; one legend for the figure, a colour per (mode, workers, envs) in every panel.

    `thresholds` overrides the return threshold per env, as in summary_rows."""
    written: list[Path] = []
    groups = group_runs(runs)
    envs = sorted({key[0] for key in groups})
    if not envs:
        return written
    for x, xlabel, name in (
        ("env_steps", "env steps", "learning_curves_steps.png"),
        ("wall_time_s", "training wall time (s)", "learning_curves_time.png"),
    ):
        fig, axes, columns = panel_grid(envs)
        colors = group_colors({key[1:] for key in groups})
        for ax, env in zip(axes, envs):
            members_of_env = []
            for (env_id, mode, workers, num_envs), members in groups.items():
                if env_id != env:
                    continue
                members_of_env += members
                curve = learning_curve(members, x=x)
                if curve is None:
                    continue
                grid, mean, std = curve
                label = (
                    f"{mode}, {plural(workers, 'worker')}, {plural(num_envs, 'env')} ({plural(len(members), 'seed')})"
                )
                color = colors[(mode, workers, num_envs)]
                ax.plot(grid, mean, label=label, color=color)
                ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2)
            threshold, _ = return_threshold(env, members_of_env, thresholds)
            if threshold is not None:
                ax.axhline(threshold, color="black", linewidth=1, linestyle="--", label="return threshold")
                ax.set_title(f"{env} (threshold {threshold:g})", fontsize=10)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(compact_number))
        _label_axes(axes, columns, xlabel, "mean return (last 20 episodes)")
        written.append(_finish(fig, axes, out_dir / name))
    return written


def plot_benchmark_curves(groups: dict, out_dir: Path) -> list[Path]:
    """A benchmark row's learning curve, one PNG each (`curves/<name>`, rlpar.analysis.benchmark.curve_name):
    the training return (last 20 episodes) against env steps, mean and +-1 std band over seeds; each
    seed's final deterministic evaluation as a dot; the reference's (RL-Zoo's or CleanRL's) figure
    dashed, minus one std dotted, and its budget as a vertical line.
    `groups`: rlpar.analysis.benchmark.group_rows."""
    import rlpar.analysis.rl_zoo as rl_zoo
    from rlpar.analysis.benchmark import curve_name

    written: list[Path] = []
    folder = Path(out_dir) / "curves"
    for key, members in groups.items():
        algo, env, mode, workers = key
        zoo = rl_zoo.reference(algo, env)
        fig, axes, _ = panel_grid(
            [
                f"{algo} on {env}"
                + ("" if mode == "local" and workers == 1 else f" ({mode}, {plural(workers, 'worker')})")
            ]
        )
        ax = axes[0]
        curve = learning_curve([run for run, _ in members], x="env_steps")
        if curve is not None:
            grid, mean, std = curve
            ax.plot(grid, mean, color="C0", label=f"rlpar, training return ({plural(len(members), 'seed')})")
            ax.fill_between(grid, mean - std, mean + std, color="C0", alpha=0.2)
        ax.scatter(
            [run.final["env_steps"] for run, _ in members],
            [e["eval_return_mean"] for _, e in members],
            color="C3",
            zorder=3,
            s=18,
            label="rlpar, final deterministic evaluation",
        )
        if zoo is not None:
            name = f"{zoo.source} {zoo.algo} {zoo.env}"
            ax.axhline(zoo.mean, color="black", linewidth=1, linestyle="--", label=f"{name}: {zoo.mean:g}")
            ax.axhline(zoo.bar, color="black", linewidth=1, linestyle=":", label=f"{name} - 1 std: {zoo.bar:g}")
            ax.axvline(
                zoo.n_timesteps,
                color="grey",
                linewidth=0.8,
                label=f"{zoo.source} budget: {compact_number(zoo.n_timesteps)}",
            )
        ax.set_xlabel("env steps")
        ax.set_ylabel("return")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(compact_number))
        folder.mkdir(parents=True, exist_ok=True)
        written.append(_finish(fig, axes, folder / curve_name(key)))
    return written


def plot_trials(search, out_dir: Path, metric: str | None = None, threshold: float | None = None) -> Path | None:
    """A search's `metric` against env steps and wall time, a line per trial, the best one bold.

    Trials are configurations of their own, so each is drawn and named with its hyper-parameters
    (never averaged like seeds); with many trials only the best is named in the legend, the others
    are thin grey lines. `threshold`: the return to reach, dashed."""
    metric = metric or search.metric
    best = search.best_trial()
    named = len(search.trials) <= 12
    fig, axes, _ = panel_grid([f"{metric} against env steps", f"{metric} against wall time"])
    drawn = False
    for index, (name, run) in enumerate(sorted(search.trials.items())):
        rows = [r for r in run.metrics if r.get(metric) is not None]
        if not rows:
            continue
        drawn = True
        if name == best:
            style = dict(linewidth=2.4, color="black", zorder=3, label=f"{search.label(name)}, best")
        elif named:
            style = dict(linewidth=1, alpha=0.8, color=f"C{index % 10}", label=search.label(name))
        else:
            style = dict(linewidth=0.8, alpha=0.5, color="grey", label="other trials")
        for ax, x in zip(axes, ("env_steps", "wall_time_s")):
            ax.plot(*_broken_at_exploits(rows, x, metric), **style)
    if not drawn:
        plt.close(fig)
        return None
    for ax, xlabel in zip(axes, ("env steps", "training wall time (s)")):
        if threshold is not None:
            ax.axhline(threshold, color="black", linewidth=1, linestyle="--", label=f"return threshold ({threshold:g})")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(compact_number))
    return _finish(fig, axes, Path(out_dir) / "search_trials.png")


def _broken_at_exploits(rows: list[dict], x: str, metric: str) -> tuple[list, list]:
    """xs and ys with a gap (NaN) where population-based training restarted the trial from another
    trial's checkpoint: its steps and time go on from the donor's, often back, and a line drawn
    across would look like a fall in the metric."""
    xs, ys = [], []
    for previous, row in zip([None, *rows], rows):
        if previous and (row.get("pbt_exploits") != previous.get("pbt_exploits") or row[x] < previous[x]):
            xs.append(float("nan"))
            ys.append(float("nan"))
        xs.append(row[x])
        ys.append(row[metric])
    return xs, ys


def _finish(fig, axes, path: Path) -> Path:
    """One legend for the whole figure, right of the panels, so no panel's curves hide under it."""
    legend: dict[str, Any] = {}
    for ax in axes:
        ax.grid(alpha=0.3)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.tight_layout()
    extra = []
    if legend:
        extra.append(
            fig.legend(
                legend.values(), legend.keys(), loc="upper left", bbox_to_anchor=(1.0, 0.98), fontsize=8, frameon=False
            )
        )
    fig.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=extra)
    plt.close(fig)
    return path
