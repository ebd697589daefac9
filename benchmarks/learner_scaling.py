"""The learner scaling table (docs/benchmarks.md): `experiment=learner_scaling` swept on a
two-node Ray cluster on 127.0.0.1, then one row per number of learners.

    python benchmarks/learner_scaling.py            # start the cluster, sweep, print the table
    python benchmarks/learner_scaling.py table DIR  # the table of a sweep already run (any cluster)

Learner samples/s: env steps learned over the time spent learning (`time_learn_s`: sharding,
sending shards, every rank's gradient steps and their all-reduces, on rank 0's clock).
All-reduce ms: rank 0's wall time in one gradient all-reduce, waiting for peers included.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from common import ROOT, machine, read_rows

THRESHOLD = 475.0


def run_sweep(sweep_dir: Path) -> None:
    cluster = subprocess.Popen([sys.executable, "-m", "rlpar.cluster.local_cluster", "--nodes", "2"], cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = next(line.split("=", 1)[1].strip() for line in cluster.stdout if line.startswith("address="))
        subprocess.run([sys.executable, "main.py", "-m", "experiment=learner_scaling", "hardware=cluster",
                        f"ray.address={address}", f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT, check=True)
    finally:
        cluster.terminate()
        cluster.wait(60)


def run_summary(rows: list[dict]) -> dict:
    learned = sum(r.get("time_learn_s", 0.0) for r in rows)
    reached = next((r for r in rows if r["episode_return_mean"] >= THRESHOLD), None)
    reductions = [r["gradient_allreduce_ms"] for r in rows if "gradient_allreduce_ms" in r]
    allreduce_s = sum(r.get("time_gradient_allreduce_s", 0.0) for r in rows)
    return {"samples_per_s": rows[-1]["env_steps"] / learned, "learn_ms": 1000 * learned / len(rows),
            "allreduce_ms": statistics.mean(reductions) if reductions else 0.0,
            "allreduce_share": allreduce_s / learned, "final": rows[-1]["episode_return_mean"],
            "steps": reached["env_steps"] if reached else None, "seconds": reached["wall_time_s"] if reached else None}


def table(sweep_dir: Path) -> str:
    import yaml

    runs: dict[int, list[dict]] = {}
    for metrics in sorted(sweep_dir.glob("*/metrics.jsonl")):
        learners = yaml.safe_load((metrics.parent / "config.yaml").read_text())["learners"]
        runs.setdefault(learners, []).append(run_summary(read_rows(metrics)))
    lines = [f"{machine()}; {sweep_dir}", "",
             "| learners | seeds | learner samples/s | learn ms / update | all-reduce ms / step | all-reduce share of learning "
             f"| reached {THRESHOLD:g} | steps to {THRESHOLD:g} | s to {THRESHOLD:g} |",
             "|---|---|---|---|---|---|---|---|---|"]
    for learners, summaries in sorted(runs.items()):
        def mean(key, spec):
            values = [s[key] for s in summaries if s[key] is not None]
            return format(statistics.mean(values), spec) if values else "-"

        reached = sum(s["steps"] is not None for s in summaries)
        lines.append(f"| {learners} | {len(summaries)} | {mean('samples_per_s', ',.0f')} | {mean('learn_ms', '.1f')} | "
                     f"{mean('allreduce_ms', '.2f')} | {mean('allreduce_share', '.0%')} | {reached}/{len(summaries)} | "
                     f"{mean('steps', ',.0f')} | {mean('seconds', '.1f')} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["table"]:
        print(table(Path(sys.argv[2])))
        return
    import time

    sweep_dir = ROOT / "outputs" / "multirun" / f"learner_scaling_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    run_sweep(sweep_dir)
    print(table(sweep_dir))


if __name__ == "__main__":
    main()
