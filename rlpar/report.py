"""`python -m rlpar.report <sweep dir>`: report.md, results.csv and PNG plots from a sweep.

Reads every run directory below the sweep (config.yaml, metrics.jsonl). Crashed and unfinished
runs are listed in the report, not silently dropped; with no finished run it exits non-zero.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

from rlpar.analysis.runs import load_runs
from rlpar.analysis.summary import scaling_rows, summary_rows

COLUMNS = ("env", "mode", "workers", "envs", "seeds", "fps_mean", "fps_std", "speedup", "efficiency",
           "final_return_mean", "final_return_std", "threshold", "reached", "steps_to_threshold_mean",
           "seconds_to_threshold_mean")


def _fmt(value, spec=",.0f"):
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


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
            f"{r['reached']}/{r['seeds']} (>= {_fmt(r['threshold'], 'g')}) | {_fmt(r['steps_to_threshold_mean'])} | "
            f"{_fmt(r['seconds_to_threshold_mean'], '.1f')} |"
        )
    return "\n".join(lines)


def write_report(sweep_dir: Path, out_dir: Path | None = None) -> Path:
    out_dir = out_dir or sweep_dir
    runs = load_runs(sweep_dir)
    if not runs:
        raise SystemExit(f"rlpar.report: no run directories (config.yaml) under '{sweep_dir}'")
    finished = [r for r in runs if r.status == "finished"]
    if not finished:
        raise SystemExit(f"rlpar.report: none of the {len(runs)} runs under '{sweep_dir}' has finished")
    rows = scaling_rows(summary_rows(runs))
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: row.get(k) for k in COLUMNS} for row in rows)

    from rlpar.analysis.plots import plot_learning_curves, plot_scaling

    plots = plot_scaling(rows, out_dir) + plot_learning_curves(finished, out_dir)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlpar.report", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep directory)")
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        raise SystemExit(f"rlpar.report: '{args.sweep_dir}' is not a directory")
    report = write_report(args.sweep_dir, args.out)
    print(f"wrote {report}")


if __name__ == "__main__":
    main(sys.argv[1:])
