"""`python -m rlpar.report <sweep or search dir>`: report.md, results.csv and PNG plots from a sweep or a search.

Reads every run directory below the sweep (config.yaml, metrics.jsonl; symlinked directories are
followed); seeds of the same env, mode, workers and envs are averaged. Crashed and unfinished runs
are listed in the report, not silently dropped; with no finished run it says so in one sentence and
exits non-zero. Return thresholds come from `--threshold ENV=VALUE`, else the run's
`env.reward_threshold`, else Gymnasium's registered `reward_threshold` (rlpar.analysis.runs.return_threshold).

A search directory (rlpar.search: search.csv, or a config.yaml with `search` set) is reported trial
by trial instead, since its trials differ by hyper-parameters, not by seed: the trials best first,
the best one and the command that reruns it, how many ended how, and their curves.

A benchmark sweep (`experiment=benchmark`, or `--benchmark`) is reported as RL Baselines3 Zoo's
table: a row per (algorithm, environment, parallel mode), rlpar's final deterministic evaluation
over seeds beside RL-Zoo's figure and budget (CleanRL's on Atari), the time each row and the PPO
row of its environment took to reach the figure minus one std, and a learning curve per row
(docs/benchmark_table.md).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

from rlpar.analysis import rl_zoo
from rlpar.analysis.benchmark import COLUMNS as BENCHMARK_COLUMNS
from rlpar.analysis.benchmark import benchmark_rows, group_rows, is_benchmark, not_included
from rlpar.analysis.runs import is_search_dir, load_runs, no_finished_runs, return_threshold
from rlpar.analysis.search import Search, load_search, no_trials
from rlpar.analysis.summary import scaling_rows, summary_rows

COLUMNS = (
    "env",
    "mode",
    "workers",
    "envs",
    "seeds",
    "fps_mean",
    "fps_std",
    "speedup",
    "efficiency",
    "final_return_mean",
    "final_return_std",
    "threshold",
    "threshold_source",
    "reached",
    "steps_to_threshold_mean",
    "seconds_to_threshold_mean",
)


def _fmt(value, spec=",.0f"):
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def _reached(row: dict) -> str:
    if row["threshold"] is None:
        return "- (no threshold)"
    return f"{row['reached']}/{row['seeds']} (>= {row['threshold']:g})"


def thresholds_line(rows: list[dict]) -> str:
    """Where each env's return threshold comes from, so a reader can tell a target from a guess."""
    sources = {
        "override": "--threshold",
        "run config": "env.reward_threshold in the run's config",
        "Gymnasium": "Gymnasium's reward_threshold",
        "rlpar": "rlpar's target; Gymnasium registers none",
    }
    parts = []
    for env, row in {r["env"]: r for r in rows}.items():
        if row["threshold"] is None:
            parts.append(f"{env}: none (Gymnasium registers none; pass --threshold {env}=VALUE)")
        else:
            parts.append(
                f"{env}: {row['threshold']:g} ({sources.get(row['threshold_source'], row['threshold_source'])})"
            )
    return "Return thresholds: " + "; ".join(parts) + "."


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| env | mode | workers | envs | seeds | env steps/s (mean +- std) | speed-up | efficiency | "
        "final return (mean +- std) | reached threshold | steps to threshold | s to threshold |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['mode']} | {r['workers']} | {r['envs']} | {r['seeds']} | "
            f"{_fmt(r['fps_mean'])} +- {_fmt(r['fps_std'])} | {_fmt(r['speedup'], '.2f')} | "
            f"{_fmt(r['efficiency'], '.2f')} | "
            f"{_fmt(r['final_return_mean'], '.1f')} +- {_fmt(r['final_return_std'], '.1f')} | "
            f"{_reached(r)} | {_fmt(r['steps_to_threshold_mean'])} | "
            f"{_fmt(r['seconds_to_threshold_mean'], '.1f')} |"
        )
    return "\n".join(lines)


def _warn_unknown_thresholds(thresholds: dict[str, float] | None, trained: list[str]) -> None:
    for env in sorted(set(thresholds or {}) - set(trained)):  # a typo would otherwise change nothing, silently
        print(
            f"rlpar.report: --threshold {env}: no finished run trained '{env}' (the runs trained {', '.join(trained)})",
            file=sys.stderr,
        )


def write_report(
    sweep_dir: Path,
    out_dir: Path | None = None,
    thresholds: dict[str, float] | None = None,
    benchmark: bool | None = None,
) -> Path:
    """report.md, results.csv and the plots; `thresholds` overrides return thresholds per env.
    `benchmark`: the benchmark table (None: when the runs come from experiment=benchmark)."""
    sweep_dir = Path(sweep_dir)
    out_dir = out_dir or sweep_dir
    if is_search_dir(sweep_dir):
        return write_search_report(sweep_dir, out_dir, thresholds)
    notes: list[str] = []  # runs skipped, metrics lines skipped
    runs = load_runs(sweep_dir, notes) if Path(sweep_dir).is_dir() else []
    for note in notes:
        print(f"rlpar.report: {note}", file=sys.stderr)
    nothing = no_finished_runs(sweep_dir, runs)
    if nothing:
        raise SystemExit(f"rlpar.report: {nothing}")
    if benchmark or (benchmark is None and is_benchmark(runs)):
        if thresholds:
            print(
                "rlpar.report: --threshold is not used by a benchmark report (its bar is RL-Zoo's figure minus "
                "one RL-Zoo std)",
                file=sys.stderr,
            )
        return write_benchmark_report(sweep_dir, out_dir, runs)
    finished = [r for r in runs if r.status == "finished"]
    rows = scaling_rows(summary_rows(runs, thresholds))
    _warn_unknown_thresholds(thresholds, sorted({r["env"] for r in rows}))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: row.get(k) for k in COLUMNS} for row in rows)

    from rlpar.analysis.plots import plot_learning_curves, plot_scaling

    plots = plot_scaling(rows, out_dir) + plot_learning_curves(finished, out_dir, thresholds)
    problems = [r for r in runs if r.status != "finished"]
    lines = [
        f"# Report: {sweep_dir}",
        "",
        f"Made {time.strftime('%Y-%m-%d %H:%M')} from {len(runs)} runs ({len(finished)} finished). "
        "`env steps/s` counts env steps over the training wall-clock (sampling, transfer, learning, "
        "weight sync); speed-up and efficiency are against 1 worker of the same mode.",
        "",
        markdown_table(rows),
        "",
        thresholds_line(rows),
        "",
    ]
    lines += policies_section(finished, sweep_dir)
    lines += ratings_section(runs, sweep_dir)
    if problems:
        lines += ["## Runs not included", "", "| run | status | last iteration |", "|---|---|---|"]
        lines += [
            f"| {r.path.relative_to(sweep_dir)} | {r.status} | {r.final.get('iteration', '-')} |" for r in problems
        ]
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines))
    return report


def policies_section(runs, sweep_dir: Path) -> list[str]:
    """Multi-agent runs: each policy's agent return beside the team's, from each run's last
    iteration that finished episodes."""
    lines = []
    for run in runs:
        last = next((row for row in reversed(run.metrics) if "team_return_mean" in row), None)
        if last is None:
            continue
        for key in sorted(k for k in last if k.endswith("/agent_return_mean")):
            lines.append(
                f"| {run.path.relative_to(sweep_dir) if run.path != sweep_dir else run.path.name} | "
                f"{key.split('/')[0]} | {last[key]:.2f} | {last['team_return_mean']:.2f} | {last['env_steps']:,} |"
            )
    if not lines:
        return []
    return [
        "## Policies (multi-agent runs)",
        "",
        "| run | policy | agent return | team return | env steps |",
        "|---|---|---|---|---|",
        *lines,
        "",
    ]


def ratings_section(runs, sweep_dir: Path) -> list[str]:
    """Self-play runs (env.opponent=pool): an Elo-style table of the current policy, the pool's
    snapshots and the references, fitted from the games each run logged (rlpar.selfplay.ratings)."""
    from rlpar.selfplay.ratings import ANCHOR, ANCHOR_RATING, rating_table

    lines = []
    for run in runs:
        table = rating_table(run.metrics)
        if not table:
            continue
        name = run.path.relative_to(sweep_dir) if run.path != sweep_dir else run.path.name
        lines += [
            f"### {name}",
            "",
            "| player | Elo | games | score |",
            "|---|---|---|---|",
            *(
                f"| {row['player']} | {row['rating']:.0f} | {row['games']:,} | {_fmt(row['score'], '.3f')} |"
                for row in table
            ),
            "",
        ]
    if not lines:
        return []
    return [
        "## Ratings (self-play runs)",
        "",
        f"Fitted from the games each run logged (`games_by_opponent`), {ANCHOR} anchored at {ANCHOR_RATING:.0f}; "
        "`current` is the learner since the newest snapshot, a snapshot `vN` also rates the learner from "
        "update N until the next snapshot; score: wins and half the draws.",
        "",
        *lines,
    ]


# -- a benchmark: RL-Zoo's table ---------------------------------------------------------------
def _duration(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _mode(row: dict) -> str:
    return row["mode"] if row["mode"] == "local" and row["workers"] == 1 else f"{row['mode']}, {row['workers']} workers"


def _zoo_row(row: dict) -> str:
    """The reference row compared with; CleanRL's named as such (the columns say RL-Zoo)."""
    if row["rl_zoo_algo"] is None:
        return "- (RL-Zoo has none)"
    nearest = f" ({row['rl_zoo_algo'].upper()}'s row)" if row["rl_zoo_algo"] != row["algo"] else ""
    source = "" if row.get("reference_source") in (None, rl_zoo.RL_ZOO) else f"{row['reference_source']}: "
    return f"{source}{row['rl_zoo_algo']} {row['rl_zoo_env']}{nearest}"


def _time_to_bar(seconds: float | None, seeds: str | None) -> str:
    """`<mean time> (<reached>/<seeds>)`; `-` without a bar to reach (or no PPO row)."""
    return "-" if seeds is None else f"{_duration(seconds)} ({seeds})"


def benchmark_table(rows: list[dict]) -> str:
    lines = [
        "| algorithm | environment | mode | seeds | rlpar: final evaluation (mean +- std over seeds) | RL-Zoo row | "
        "RL-Zoo (mean +- std) | RL-Zoo budget | ratio | reached RL-Zoo - 1 std | env steps | training wall time | "
        "time to RL-Zoo - 1 std (seeds) | PPO's | curve |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        zoo = "-" if r["rl_zoo_mean"] is None else f"{r['rl_zoo_mean']:.1f} +- {r['rl_zoo_std']:.1f}"
        lines.append(
            f"| {r['algo']} | {r['env']} | {_mode(r)} | {r['seeds']} | "
            f"{r['eval_return_mean']:.1f} +- {r['eval_return_std']:.1f} | {_zoo_row(r)} | {zoo} | "
            f"{_fmt(r['rl_zoo_budget'])} | {_fmt(r['ratio'], '.2f')} | {r['reached_rl_zoo_minus_std'] or '-'} | "
            f"{_fmt(r['env_steps_mean'])} | {_duration(r['wall_time_s_mean'])} | "
            f"{_time_to_bar(r['time_to_bar_s_mean'], r['time_to_bar_seeds'])} | "
            f"{_time_to_bar(r['ppo_time_to_bar_s_mean'], r['ppo_time_to_bar_seeds'])} | [png]({r['curve']}) |"
        )
    return "\n".join(lines)


def write_benchmark_report(sweep_dir: Path, out_dir: Path, runs) -> Path:
    """report.md (the table), results.csv (its rows, each seed's figure too) and curves/<row>.png."""
    from rlpar.analysis.plots import plot_benchmark_curves

    rows = benchmark_rows(runs)
    left_out = not_included(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=BENCHMARK_COLUMNS)
        writer.writeheader()
        writer.writerows({k: row.get(k) for k in BENCHMARK_COLUMNS} for row in rows)
    plots = plot_benchmark_curves(group_rows(runs), out_dir)
    judged = [r for r in rows if r["reached_rl_zoo_minus_std"] is not None]
    nearest = sorted({(r["algo"], r["rl_zoo_algo"]) for r in rows if r["rl_zoo_algo"] not in (None, r["algo"])})
    cleanrl = [r for r in rows if r["reference_source"] == rl_zoo.CLEANRL]
    lines = [
        f"# Benchmark report: {sweep_dir}",
        "",
        f"Made {time.strftime('%Y-%m-%d %H:%M')} from {len(runs)} runs ({len(runs) - len(left_out)} finished with a "
        f"final evaluation), {len(rows)} rows. Rows reaching RL-Zoo's figure minus one RL-Zoo std: "
        f"{sum(r['reached_rl_zoo_minus_std'] == 'yes' for r in judged)} of {len(judged)}.",
        "",
        benchmark_table(rows),
        "",
        "- **rlpar**: each seed's final evaluation (the deterministic policy, `eval_episodes` episodes on fresh "
        "environments, `evaluations.jsonl`), averaged over seeds; +- is the std over seeds.",
        f"- **RL-Zoo**: {rl_zoo.SOURCE}: one trained agent per row, its deterministic policy's mean and std over "
        "its evaluation episodes (the std is one agent's spread over episodes, not over seeds). Its rows were "
        "measured on LunarLander-v2, LunarLanderContinuous-v2 and MuJoCo's v3 tasks (mujoco-py), which rlpar "
        "trains as Gymnasium 1.4's -v3 and v5.",
        *(
            [
                f"- **CleanRL**: the reference of {', '.join(sorted({r['env'] for r in cleanrl}))} (every other "
                "row's is RL-Zoo's), in the RL-Zoo columns and marked CleanRL there: "
                f"{rl_zoo.CLEANRL_SOURCE}: PPO's episodic return, mean and std over seeds, at 10M agent steps "
                "(40M frames): 4x the Atari rows' budget of 2.5M agent steps (10M frames), on the "
                "NoFrameskip-v4 games, without sticky actions as rlpar's ALE v5 games (conf/env/atari.yaml)."
            ]
            if cleanrl
            else []
        ),
        "- **ratio**: rlpar / RL-Zoo where RL-Zoo's figure is positive, RL-Zoo / rlpar where it is negative: above 1 "
        "is better than RL-Zoo, below 1 worse, either way (below 0: rlpar's is negative, RL-Zoo's positive); - for "
        "a negative RL-Zoo figure against a return of 0 or more.",
        "- **reached RL-Zoo - 1 std**: rlpar's mean over seeds >= RL-Zoo's mean minus RL-Zoo's std.",
        "- **env steps** and **training wall time**: means over seeds, as `metrics.jsonl` ends (the evaluation "
        "and start-up are not counted).",
        "- **time to RL-Zoo - 1 std (seeds)**: the training wall time at which a seed's training return (`episode_"
        "return_mean` of `metrics.jsonl`) first reached the reference's figure minus one std, the mean over the "
        "seeds that reached it (how many of how many in brackets); **PPO's**: the same, to the same bar, of the PPO "
        "row of the environment in this sweep (- where there is none).",
    ]
    if nearest:
        lines.append(
            "- **RL-Zoo row of another algorithm**: "
            + "; ".join(f"{algo} against {zoo_algo}'s" for algo, zoo_algo in nearest)
            + " (RL-Zoo has no row of its own for them)."
        )
    lines.append("")
    if left_out:
        lines += ["## Runs not included", "", "| run | status | last iteration |", "|---|---|---|"]
        lines += [
            f"| {r.path.relative_to(sweep_dir) if r.path != sweep_dir else r.path.name} | {why} | "
            f"{r.final.get('iteration', '-')} |"
            for r, why in left_out
        ]
        lines.append("")
    if plots:
        lines += ["## Learning curves", ""] + [f"![{p.stem}](curves/{p.name})" for p in plots] + [""]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines))
    return report


# -- a search: trial by trial ------------------------------------------------------------------
RUN_COLUMNS = ("env", "mode", "workers", "envs", "fps")  # results.csv of a search: what each trial's run says


def _run_columns(run) -> dict:
    if run is None:  # listed in search.csv, no run directory (yet)
        return dict.fromkeys(RUN_COLUMNS)
    return {"env": run.env_id, "mode": run.mode, "workers": run.workers, "envs": run.num_envs, "fps": run.fps}


def trials_table(search: Search, rows: list[dict]) -> str:
    """search.csv as markdown, best first, with each trial's env steps/s; PBT's exploits when there were any."""
    metric = search.metric
    pbt = any(row.get("pbt_exploits") for row in rows)
    header = [
        "trial",
        "status",
        *search.hyperparameters,
        f"final {metric}",
        f"best {metric}",
        "iterations",
        "env steps",
        "env steps/s",
        *(["PBT exploits"] if pbt else []),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            row["trial"],
            row["status"],
            *(_fmt(row.get(key), ".4g") for key in search.hyperparameters),
            _fmt(row.get(f"final_{metric}"), ".4g"),
            _fmt(row.get(f"best_{metric}"), ".4g"),
            _fmt(row.get("iterations")),
            _fmt(row.get("env_steps")),
            _fmt(row.get("fps")),
            *([_fmt(row.get("pbt_exploits"))] if pbt else []),
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def best_section(search: Search, rows: list[dict]) -> list[str]:
    """best.yaml's trial and the command that reruns it; before the search has written best.yaml, the leader so far."""
    metric = search.metric
    if not search.best:
        leader = f"`{rows[0]['trial']}`" if rows and rows[0].get(f"final_{metric}") is not None else "none yet"
        return [
            "## Best trial",
            "",
            f"No best.yaml yet (the search is under way or was interrupted); the best final {metric} so far: {leader}.",
            "",
        ]
    best = search.best
    overrides = ", ".join(f"{key}={value}" for key, value in (best.get("overrides") or {}).items())
    lines = [
        "## Best trial",
        "",
        f"`{best.get('trial')}` ({best.get('status')}; {overrides}): final {best.get('metric', metric)} "
        f"{_fmt(best.get('final'), '.4g')}, best {_fmt(best.get('best'), '.4g')}.",
    ]
    if best.get("command"):
        lines += ["", "Rerun it with:", "", "```", str(best["command"]), "```"]
    return lines + [""]


def write_search_report(search_dir: Path, out_dir: Path, thresholds: dict[str, float] | None = None) -> Path:
    """report.md, results.csv (a row per trial with its hyper-parameters) and search_trials.png for a search."""
    search = load_search(search_dir)
    nothing = no_trials(search_dir, search, instead="point to another directory")
    if nothing:
        raise SystemExit(f"rlpar.report: {nothing}")
    rows = [{**row, **_run_columns(search.trials.get(str(row["trial"])))} for row in search.rows()]
    runs = list(search.trials.values())
    envs = sorted({run.env_id for run in runs})
    _warn_unknown_thresholds(thresholds, envs)
    threshold = None
    threshold_rows: list[dict[str, Any]] = []
    if search.metric == "episode_return_mean":
        for env in envs:
            value, source = return_threshold(env, [r for r in runs if r.env_id == env], thresholds)
            threshold_rows.append({"env": env, "threshold": value, "threshold_source": source})
        threshold = threshold_rows[0]["threshold"] if len(envs) == 1 else None  # one line means one env

    out_dir.mkdir(parents=True, exist_ok=True)
    columns = [key for key in dict.fromkeys(key for row in rows for key in row) if key != "run_dir"] + ["run_dir"]
    with open(out_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

    from rlpar.analysis.plots import plot_trials

    plot = plot_trials(search, out_dir, threshold=threshold)
    scheduler = str((search.settings.get("scheduler") or {}).get("_target_", "unknown scheduler")).rsplit(".", 1)[-1]
    counts = ", ".join(f"{count} {status}" for status, count in search.status_counts().items())
    lines = [
        f"# Search report: {search_dir}",
        "",
        f"Made {time.strftime('%Y-%m-%d %H:%M')} from the {len(rows)} trials of a search over "
        f"{', '.join(search.hyperparameters) or 'unknown hyper-parameters'} on {', '.join(envs)} ({scheduler}; "
        f"{'highest' if search.maximise else 'lowest'} final {search.metric} is best). Each trial is a configuration "
        "of its own: trials differ by their hyper-parameters, not by seed, so they are listed one by one, "
        "not averaged.",
        "",
        f"Trials by status: {counts}.",
        "",
        *best_section(search, rows),
        f"## Trials, best first (by final {search.metric})",
        "",
        trials_table(search, rows),
        "",
    ]
    if any(row.get("pbt_exploits") for row in rows):
        lines += [
            "Population-based training: a trial went on `PBT exploits` times from another trial's checkpoint, "
            "so its hyper-parameters here are its last ones, and its env steps and wall time continue from "
            "the other trial's (a gap in its curve).",
            "",
        ]
    if threshold_rows:
        lines += [thresholds_line(threshold_rows), ""]
    if plot:
        lines += ["## Plots", "", f"![{plot.stem}]({plot.name})", ""]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines))
    return report


def parse_thresholds(items: list[str], parser: argparse.ArgumentParser) -> dict[str, float]:
    thresholds = {}
    for item in items:
        env, _, value = item.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not env or number is None:
            parser.error(f"--threshold {item!r}: expected ENV=NUMBER, e.g. --threshold CartPole-v1=450")
        thresholds[env] = number
    return thresholds


def main(argv: list[str] | None = None, prog: str = "python -m rlpar.report") -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep directory)")
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="ENV=VALUE",
        help="return threshold for ENV (an id or entry point as the report names it); repeatable",
    )
    parser.add_argument(
        "--benchmark",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the benchmark table against RL Baselines3 Zoo's figures (default: for runs of experiment=benchmark)",
    )
    args = parser.parse_args(argv)
    report = write_report(args.sweep_dir, args.out, parse_thresholds(args.threshold, parser), benchmark=args.benchmark)
    print(f"wrote {report}")


if __name__ == "__main__":
    main(sys.argv[1:])
