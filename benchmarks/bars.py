"""The distributed algorithms' bars, one run at a time: seeds reaching 475 on CartPole, and the
algorithm's own Ray actor killed mid-run.

    .venv/bin/python benchmarks/bars.py apex                 # seeds 0 1 2, then seed 0 with a kill
    .venv/bin/python benchmarks/bars.py a3c --seeds 3 --kill-at 0
    .venv/bin/python benchmarks/bars.py a3c --parallel multiprocess --workers 2 --kill-at 0

Each run is `python main.py algo=A parallel=P workers=W seed=S total_steps=T` (apex: distributed,
8 workers, 200k steps; a3c: distributed, 4 workers, 500k). With a kill, once the run has logged
`--kill-at` env steps one of its `ray::ReplayShard` (apex) or `ray::ParameterServer` (a3c)
processes, found among the run's own descendants, gets SIGKILL. One line per run: env steps and
seconds to a mean return of 475, the final return, and the algorithm's own figures (apex: replay
shards and restarts, achieved and target samples per insert, the rate limiter's waits; a3c: the
gradients' staleness and parameter server restarts).
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

def last(key):
    return lambda logged: logged[-1].get(key)


def staleness_mean(logged):
    """Over the whole run: each iteration's mean weighted by the gradients it applied."""
    pairs = [(r["gradient_staleness_mean"], r["gradients_applied"]) for r in logged if "gradient_staleness_mean" in r]
    return sum(m * n for m, n in pairs) / max(sum(n for _, n in pairs), 1)


ALGOS = {
    "apex": {"workers": 8, "total_steps": 200_000, "actor": "ray::ReplayShard",
             "columns": {"shards": last("replay_shards"), "restarts": last("replay_shard_restarts"),
                         "samples/insert": last("samples_per_insert"), "target": last("samples_per_insert_target"),
                         "insert wait s": last("replay_insert_wait_s"), "learner wait s": last("replay_sample_wait_s")}},
    "a3c": {"workers": 4, "total_steps": 500_000, "actor": "ray::ParameterServer",
            "columns": {"gradient staleness mean": staleness_mean,
                        "staleness max": lambda logged: max(r.get("gradient_staleness_max", 0) for r in logged),
                        "server restarts": last("parameter_server_restarts")}},
}


def rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def kill_one(pid: int, name: str) -> int | None:
    """SIGKILL the first of the run's descendants whose command line starts with `name`."""
    victims = [p for (p, _), cmd in descendants_of(pid).items() if cmd.startswith(name)]
    if victims:
        os.kill(victims[0], signal.SIGKILL)
    return victims[0] if victims else None


def run(algo: str, parallel: str, workers: int, seed: int, kill_at: int | None, workdir: Path) -> dict:
    spec = ALGOS[algo]
    run_dir = workdir / f"{algo}_{parallel}_s{seed}{'_kill' if kill_at else ''}"
    command = ["main.py", f"algo={algo}", f"parallel={parallel}", f"workers={workers}", f"seed={seed}",
               f"total_steps={spec['total_steps']}", "checkpoint.every=0", "progress=false", f"hydra.run.dir={run_dir}"]
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    killed = None
    while proc.poll() is None:
        time.sleep(0.2)
        if kill_at is not None and killed is None:
            logged = rows(run_dir / "metrics.jsonl")
            if logged and logged[-1]["env_steps"] >= kill_at:
                killed = (kill_one(proc.pid, spec["actor"]), logged[-1]["env_steps"])
    stderr = proc.stderr.read()
    logged = rows(run_dir / "metrics.jsonl")
    if proc.returncode != 0 or not logged:
        raise SystemExit(f"{' '.join(command)}: exit {proc.returncode}: {stderr.strip()[-500:]}")
    first = next((r for r in logged if (r.get("episode_return_mean") or 0) >= 475), None)
    final = logged[-1]
    return {"seed": seed, "killed": killed, "steps_to_475": first and first["env_steps"],
            "s_to_475": first and first["wall_time_s"], "final_return": final["episode_return_mean"],
            "env_steps": final["env_steps"], "own": [column(logged) for column in spec["columns"].values()],
            "process_s": time.monotonic() - began}


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "-" if value is None else f"{value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("algo", choices=sorted(ALGOS))
    parser.add_argument("--parallel", default="distributed", choices=("distributed", "multiprocess"))
    parser.add_argument("--workers", type=int, help="default: 8 for apex, 4 for a3c")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--kill-seed", type=int, default=0)
    parser.add_argument("--kill-at", type=int, default=20_000, help="env steps; 0: no kill run")
    args = parser.parse_args()
    spec = ALGOS[args.algo]
    workers = args.workers or spec["workers"]
    plan = [(seed, None) for seed in args.seeds] + ([(args.kill_seed, args.kill_at)] if args.kill_at else [])
    columns = ["seed", f"{spec['actor']} killed (pid at env steps)", "steps to 475", "s to 475", "final return",
               "env steps", *spec["columns"], "process s"]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} algo={args.algo} parallel={args.parallel} workers={workers}")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    with tempfile.TemporaryDirectory() as workdir:
        for seed, kill_at in plan:
            r = run(args.algo, args.parallel, workers, seed, kill_at, Path(workdir))
            killed = f"{r['killed'][0]} at {r['killed'][1]:,}" if r["killed"] else "-"
            reached = f"{r['steps_to_475']:,}" if r["steps_to_475"] else "not reached"
            seconds = f"{r['s_to_475']:.0f}" if r["s_to_475"] else "-"
            cells = [seed, killed, reached, seconds, f"{r['final_return']:.1f}", f"{r['env_steps']:,}",
                     *map(cell, r["own"]), f"{r['process_s']:.0f}"]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
