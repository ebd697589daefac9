"""Ape-X's bars, one run at a time: seeds reaching 475, and a ReplayShard process killed mid-run.

    .venv/bin/python benchmarks/apex_bars.py                 # seeds 0 1 2, then seed 0 with a kill
    .venv/bin/python benchmarks/apex_bars.py --seeds 3 --kill-at 0

Each run is `python main.py algo=apex parallel=distributed workers=8 seed=S total_steps=200000`.
With a kill, once the run has logged `--kill-at` env steps one of its `ray::ReplayShard` processes
(found among the run's own descendants) gets SIGKILL. One line per run: env steps and seconds
to a mean return of 475, the final return, replay shards and restarts, the achieved and target
samples per insert, and the rate limiter's waits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.processes import descendants_of  # noqa: E402

COMMAND = ("main.py", "algo=apex", "parallel=distributed", "workers=8", "total_steps=200000", "checkpoint.every=0",
           "progress=false")


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def kill_a_shard(pid: int) -> int | None:
    shards = [p for (p, _), cmd in descendants_of(pid).items() if cmd.startswith("ray::ReplayShard")]
    if shards:
        os.kill(shards[0], signal.SIGKILL)
    return shards[0] if shards else None


def run(seed: int, kill_at: int | None, workdir: Path) -> dict:
    run_dir = workdir / f"s{seed}{'_kill' if kill_at else ''}"
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, *COMMAND, f"seed={seed}", f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = None
    while proc.poll() is None:
        time.sleep(0.2)
        if kill_at is not None and killed is None:
            logged = rows(run_dir / "metrics.jsonl")
            if logged and logged[-1]["env_steps"] >= kill_at:
                killed = (kill_a_shard(proc.pid), logged[-1]["env_steps"])
    stderr = proc.stderr.read()
    logged = rows(run_dir / "metrics.jsonl")
    if proc.returncode != 0 or not logged:
        raise SystemExit(f"seed {seed}: exit {proc.returncode}: {stderr.strip()[-500:]}")
    first = next((r for r in logged if (r.get("episode_return_mean") or 0) >= 475), None)
    last = logged[-1]
    return {"seed": seed, "killed": killed, "steps_to_475": first and first["env_steps"],
            "s_to_475": first and first["wall_time_s"], "final_return": last["episode_return_mean"],
            "env_steps": last["env_steps"], "shards": last["replay_shards"], "restarts": last["replay_shard_restarts"],
            "spi": last["samples_per_insert"], "spi_target": last["samples_per_insert_target"],
            "insert_wait_s": last["replay_insert_wait_s"], "sample_wait_s": last["replay_sample_wait_s"],
            "process_s": time.monotonic() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--kill-seed", type=int, default=0)
    parser.add_argument("--kill-at", type=int, default=20_000, help="env steps; 0: no kill run")
    args = parser.parse_args()
    plan = [(seed, None) for seed in args.seeds] + ([(args.kill_seed, args.kill_at)] if args.kill_at else [])
    print("| seed | shard killed (pid at env steps) | steps to 475 | s to 475 | final return | env steps | shards "
          "| restarts | samples/insert (target) | insert wait s | learner wait s | process s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for seed, kill_at in plan:
            r = run(seed, kill_at, Path(workdir))
            killed = f"{r['killed'][0]} at {r['killed'][1]:,}" if r["killed"] else "-"
            reached = f"{r['steps_to_475']:,}" if r["steps_to_475"] else "not reached"
            seconds = f"{r['s_to_475']:.0f}" if r["s_to_475"] else "-"
            print(f"| {seed} | {killed} | {reached} | {seconds} | {r['final_return']:.1f} | {r['env_steps']:,} | "
                  f"{r['shards']} | {r['restarts']} | {r['spi']:.2f} ({r['spi_target']:g}) | "
                  f"{r['insert_wait_s']:.1f} | {r['sample_wait_s']:.1f} | {r['process_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
