"""Atari frames per second of each sampler, training included (PPO and IMPALA on Pong, 2 cores).

    .venv/bin/python benchmarks/atari_fps.py [--steps 40000] [--algos ppo impala] [--samplers ...]
        [--precisions fp32 auto]

`--precisions`: each (algo, sampler) row once per `algo.precision`, run one after the other (auto
is the default: bf16 for the CNN on a CPU with native bf16 arithmetic).

Each row is one `python main.py env=atari ...` run with the algorithm's Atari preset
(conf/preset/<algo>/ALE.yaml) and the CNN `auto` picks (Nature, torch acting copy). `frames/s`
counts emulator frames (agent steps x frame skip 4) over the second half of the run, once
start-up and the first iterations are behind it; `total` is over the whole run, start-up
excluded (process start and Ray's boot are in `process s`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLERS = {  # the workers each sampler gets on 2 cores
    "local": ["parallel=local", "workers=1"],
    "multiprocess": ["parallel=multiprocess", "workers=2"],
    "distributed": ["parallel=distributed", "workers=4"],
}


def run(algo: str, sampler: str, steps: int, precision: str = "auto") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "main.py", "env=atari", "env.id=ALE/Pong-v5", f"algo={algo}", *SAMPLERS[sampler],
             f"total_steps={steps}", f"algo.precision={precision}", "progress=false", "checkpoint.every=0",
             f"hydra.run.dir={tmp}"],
            cwd=ROOT, capture_output=True, text=True,
        )
        process_s = time.perf_counter() - start
        if proc.returncode != 0:
            return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    half = rows[len(rows) // 2]
    last = rows[-1]
    return {
        "frames_per_s": (last["frames"] - half["frames"]) / (last["wall_time_s"] - half["wall_time_s"]),
        "total_frames_per_s": last["frames"] / last["wall_time_s"],
        "learn_share": sum(r.get("time_learn_s", 0.0) for r in rows) / last["wall_time_s"],
        "process_s": process_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000, help="agent steps per run")
    parser.add_argument("--algos", nargs="+", default=["ppo", "impala"])
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--precisions", nargs="+", default=["auto"], help="algo.precision values, alternated")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, {args.steps:,} agent steps a run")
    print("| algo | sampler | precision | frames/s (second half) | frames/s (whole run) | learner share | process s |")
    print("|---|---|---|---|---|---|---|")
    for algo in args.algos:
        for sampler in args.samplers:
            for precision in args.precisions:
                r = run(algo, sampler, args.steps, precision)
                if "error" in r:
                    print(f"| {algo} | {sampler} | {precision} | error: {r['error']} | | | |", flush=True)
                    continue
                print(f"| {algo} | {sampler} | {precision} | {r['frames_per_s']:,.0f} | {r['total_frames_per_s']:,.0f} | "
                      f"{r['learn_share']:.0%} | {r['process_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
