"""`python -m rlpar.report <sweep dir>`: report.md, results.csv and PNG plots from a sweep.

Reads every run directory below the sweep (config.yaml, metrics.jsonl; symlinked directories are
followed). Crashed and unfinished runs are listed in the report, not silently dropped; with no
finished run it says so in one sentence and exits non-zero. Return thresholds come from
`--threshold ENV=VALUE`, else the run's `env.reward_threshold`, else Gymnasium's registered
`reward_threshold` (rlpar.analysis.runs.return_threshold).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

from rlpar.analysis.runs import load_runs, no_finished_runs
from rlpar.analysis.summary import scaling_rows, summary_rows

COLUMNS = ("env", "mode", "workers", "envs", "seeds", "fps_mean", "fps_std", "speedup", "efficiency",
           "final_return_mean", "final_return_std", "threshold", "threshold_source", "reached", "steps_to_threshold_mean",
           "seconds_to_threshold_mean")


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
    sources = {"override": "--threshold", "run config": "env.reward_threshold in the run's config",
               "Gymnasium": "Gymnasium's reward_threshold", "rlpar": "rlpar's target; Gymnasium registers none"}
    parts = []
    for env, row in {r["env"]: r for r in rows}.items():
        if row["threshold"] is None:
            parts.append(f"{env}: none (Gymnasium registers none; pass --threshold {env}=VALUE)")
        else:
            parts.append(f"{env}: {row['threshold']:g} ({sources.get(row['threshold_source'], row['threshold_source'])})")
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
            f"{_fmt(r['fps_mean'])} +- {_fmt(r['fps_std'])} | {_fmt(r['speedup'], '.2f')} | {_fmt(r['efficiency'], '.2f')} | "
            f"{_fmt(r['final_return_mean'], '.1f')} +- {_fmt(r['final_return_std'], '.1f')} | "
            f"{_reached(r)} | {_fmt(r['steps_to_threshold_mean'])} | "
            f"{_fmt(r['seconds_to_threshold_mean'], '.1f')} |"
        )
    return "\n".join(lines)


def write_report(sweep_dir: Path, out_dir: Path | None = None, thresholds: dict[str, float] | None = None) -> Path:
    """report.md, results.csv and the plots; `thresholds` overrides return thresholds per env."""
    out_dir = out_dir or sweep_dir
    runs = load_runs(sweep_dir) if Path(sweep_dir).is_dir() else []
    nothing = no_finished_runs(sweep_dir, runs)
    if nothing:
        raise SystemExit(f"rlpar.report: {nothing}")
    finished = [r for r in runs if r.status == "finished"]
    rows = scaling_rows(summary_rows(runs, thresholds))
    trained = sorted({r["env"] for r in rows})
    for env in sorted(set(thresholds or {}) - set(trained)):  # a typo would otherwise change nothing, silently
        print(f"rlpar.report: --threshold {env}: no finished run trained '{env}' (the runs trained {', '.join(trained)})",
              file=sys.stderr)
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
    if problems:
        lines += ["## Runs not included", "", "| run | status | last iteration |", "|---|---|---|"]
        lines += [f"| {r.path.relative_to(sweep_dir)} | {r.status} | {r.final.get('iteration', '-')} |" for r in problems]
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlpar.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep directory)")
    parser.add_argument("--threshold", action="append", default=[], metavar="ENV=VALUE",
                        help="return threshold for ENV (an id or entry point as the report names it); repeatable")
    args = parser.parse_args(argv)
    report = write_report(args.sweep_dir, args.out, parse_thresholds(args.threshold, parser))
    print(f"wrote {report}")


if __name__ == "__main__":
    main(sys.argv[1:])
