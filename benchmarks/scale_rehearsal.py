"""A rehearsal at scale on loopback: many nodes and runners, nodes leaving and joining mid-run.

    .venv/bin/python benchmarks/scale_rehearsal.py                       # 8 nodes, 64 runners, ppo impala apex
    .venv/bin/python benchmarks/scale_rehearsal.py --nodes 6 --runners 24 --algos impala --churn-s 180 --every-s 30 30
    .venv/bin/python benchmarks/scale_rehearsal.py --nodes 3 --runners 8 --before-s 20 --churn-s 60 --after-s 20  # a taste

For each algorithm in turn: a fresh loopback cluster of `--nodes` nodes (rlpar.cluster.local_cluster,
token authentication), then `python main.py algo=A parallel=distributed hardware=cluster
ray.address=... workers=R envs_per_worker=1 time_limit_s=T` (CartPole), where T covers a quiet
`--before-s`, `--churn-s` of churn (a worker node removed, then one added, each `--every-s` seconds
apart, drawn uniformly; it always ends with the cluster whole again) and a quiet `--after-s`.

The run must finish by itself (exit 0). Then, from its metrics.jsonl and final checkpoint:
- iterations: 1..n, each logged once;
- env steps: strictly increasing; for PPO and IMPALA every row's increase is the steps of the
  rollouts it took in (batches_this_iter x rollout_length, one environment per runner); the final
  checkpoint holds the last row's count;
- worker restarts, moves (runners put back on a node that joined) and replay-shard restarts;
- env steps/s before, during and after the churn (from rows timed by this script as they appear);
- peak memory: the resident memory of the trainer and of every process of the cluster, summed.

Prints a markdown table (one row per algorithm) and writes `--out/results.json`. Exits 1 if any check
fails. Memory: each node costs ~0.3 GB (raylet, agents), each runner ~70 MB (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, machine
from soak import Churn, family

from tests.ray_helpers import ClusterProcess

ALGOS = ("ppo", "impala", "apex")  # on-policy, asynchronous, replay-sharded


def tree_rss_mb(roots: list[int]) -> float:
    return sum(rss for root in roots for _, rss in family(root).values())


class Watch(threading.Thread):
    """Every `every_s`: the time each new metrics row appeared and the memory of the run and cluster."""

    def __init__(self, metrics: Path, roots: list[int], every_s: float = 1.0):
        super().__init__(daemon=True)
        self.metrics, self.roots, self.every_s = metrics, roots, every_s
        self.rows: list[tuple[float, dict]] = []
        self.peak_mb = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        seen = 0
        while not self.done.wait(self.every_s):
            if self.metrics.exists():
                text = self.metrics.read_text()
                complete = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
                now = time.monotonic()
                self.rows += [(now, json.loads(line)) for line in complete[seen:]]
                seen = len(complete)
            self.peak_mb = max(self.peak_mb, tree_rss_mb(self.roots))


def steps_per_s(rows: list[tuple[float, dict]], start: float, end: float) -> float | None:
    inside = [(t, r["env_steps"]) for t, r in rows if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def check(algo: str, rows: list[dict], final_checkpoint_steps: int | None, rollout: int) -> list[str]:
    problems = []
    iterations = [r["iteration"] for r in rows]
    if iterations != list(range(1, len(rows) + 1)):
        problems.append(f"iterations are not 1..{len(rows)} once each")
    steps = [0] + [r["env_steps"] for r in rows]
    for before, row in zip(steps, rows):
        added = row["env_steps"] - before
        expected = row.get("batches_this_iter", 0) * rollout if algo != "apex" else None
        if added <= 0 or (expected is not None and added != expected):
            problems.append(f"iteration {row['iteration']}: env steps +{added}"
                            + (f", its rollouts hold {expected}" if expected is not None else ""))
            break
    if final_checkpoint_steps != steps[-1]:
        problems.append(f"the final checkpoint holds {final_checkpoint_steps} env steps, the last row {steps[-1]}")
    return problems


def checkpoint_steps(run_dir: Path) -> int | None:
    from rlpar.runtime.checkpoint import load_checkpoint

    newest = sorted((run_dir / "checkpoints").glob("checkpoint_*.pt"))
    return int(load_checkpoint(newest[-1])["env_steps"]) if newest else None


def rehearse(algo: str, args, out: Path) -> dict:
    run_dir = out / algo
    print(f"[{algo}] starting a {args.nodes}-node loopback cluster", flush=True)
    cluster = ClusterProcess(nodes=args.nodes, cpus_per_node=args.cpus_per_node, timeout=60 + 30 * args.nodes)
    proc = None
    try:
        limit = args.before_s + args.churn_s + args.after_s + 30  # node events take seconds each
        overrides = [f"algo={algo}", "parallel=distributed", "hardware=cluster", f"ray.address={cluster.address}",
                     f"workers={args.runners}", "envs_per_worker=1", f"algo.rollout_length={args.rollout}",
                     "total_steps=1000000000000", f"time_limit_s={limit}", "progress=false", "checkpoint.every=50",
                     "parallel.rebalance_interval_s=5",
                     f"hydra.run.dir={run_dir}", *args.overrides]
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        launched = time.monotonic()
        proc = subprocess.Popen([sys.executable, "main.py", *overrides], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        watch = Watch(run_dir / "metrics.jsonl", [proc.pid, cluster.proc.pid])
        watch.start()
        while not watch.rows and proc.poll() is None:
            time.sleep(0.5)
        first_row = time.monotonic()
        print(f"[{algo}] training after {first_row - launched:.0f} s; churn in {args.before_s:.0f} s", flush=True)
        time.sleep(args.before_s)
        churn = Churn(cluster, duration_s=args.churn_s, every_s=tuple(args.every_s), seed=args.seed)
        churn_start = time.monotonic()
        churn.start()
        churn.join()
        churn_end = time.monotonic()
        stderr = proc.communicate(timeout=limit + 600)[1]
        watch.done.set()
        watch.join()
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        cluster.stop()
    rows = [row for _, row in watch.rows]
    problems = [] if proc.returncode == 0 else [f"exit {proc.returncode}: {stderr.strip()[-500:]}"]
    if churn.error:
        problems.append(f"churn: {churn.error}")
    problems += check(algo, rows, checkpoint_steps(run_dir), args.rollout)
    last = rows[-1] if rows else {}
    result = {
        "algo": algo, "nodes": args.nodes, "runners": args.runners, "exit": proc.returncode,
        "iterations": len(rows), "env_steps": last.get("env_steps"),
        "removed": sum(1 for _, e in churn.events if e == "removed"), "added": sum(1 for _, e in churn.events if e == "added"),
        "worker_restarts": last.get("worker_restarts"), "node_loss_restarts": last.get("node_loss_restarts"),
        "worker_moves": last.get("worker_moves"),
        "replay_shard_restarts": last.get("replay_shard_restarts"),
        "num_nodes_end": last.get("num_nodes"), "live_workers_end": last.get("live_workers"),
        "steps_per_s_before": steps_per_s(watch.rows, first_row, churn_start),
        "steps_per_s_during": steps_per_s(watch.rows, churn_start, churn_end),
        "steps_per_s_after": steps_per_s(watch.rows, churn_end, time.monotonic()),
        "peak_rss_gb": round(watch.peak_mb / 1024, 2), "start_to_training_s": round(first_row - launched, 1),
        "problems": problems,
    }
    print(f"[{algo}] {'ok' if not problems else 'FAILED: ' + '; '.join(problems)}", flush=True)
    return result


def table(results: list[dict]) -> str:
    def rate(value):
        return "-" if value is None else f"{value:,.0f}"

    lines = ["| algo | nodes x runners | iterations (each once) | env steps (accounted) | nodes removed / added | "
             "worker restarts / moves | shard restarts | nodes at the end | env steps/s before / during / after | "
             "peak RSS GB | checks |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['algo']} | {r['nodes']} x {r['runners']} | {r['iterations']:,} | {r['env_steps'] or 0:,} | "
            f"{r['removed']} / {r['added']} | {r['worker_restarts']} / {r['worker_moves']} | "
            f"{'-' if r['replay_shard_restarts'] is None else r['replay_shard_restarts']} | {r['num_nodes_end']} | "
            f"{rate(r['steps_per_s_before'])} / {rate(r['steps_per_s_during'])} / {rate(r['steps_per_s_after'])} | "
            f"{r['peak_rss_gb']} | {'pass' if not r['problems'] else '; '.join(r['problems'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runners", type=int, default=64)
    parser.add_argument("--cpus-per-node", type=float, default=4, help="logical CPUs each node offers Ray")
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--rollout", type=int, default=32, help="steps per runner per rollout")
    parser.add_argument("--before-s", type=float, default=60)
    parser.add_argument("--churn-s", type=float, default=300)
    parser.add_argument("--every-s", type=float, nargs=2, default=[20, 30], help="seconds between node events, drawn uniformly")
    parser.add_argument("--after-s", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlpar_scale_rehearsal")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for main.py (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {machine()}", flush=True)
    results = [rehearse(algo, args, args.out) for algo in args.algos]
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    sys.exit(1 if any(r["problems"] for r in results) else 0)


if __name__ == "__main__":
    main()
