"""Seconds from launch, and env steps, until a run's training return reaches a score: several
commands side by side, one run at a time, seed by seed.

Each side is a `main.py` command line (its overrides, as one string). For every seed each side
runs once, in an order that rotates with the seed (a shared machine's drift does not always
favour the same side), and is stopped with SIGTERM at the first metrics row whose
`episode_return_mean` (the mean of the last 20 episodes) reaches `--score`. A run that ends, or
hits `--timeout-s`, before that did not reach it. Seconds count from the launch of the process,
start-up included, as a user waits for them; "start-up" is the launch to the first row minus
that row's own `wall_time_s` (the training time, which starts once the run is built).

    .venv/bin/python benchmarks/time_to_score.py --score 200 --seeds 0 1 \\
        --side "env.id=LunarLander-v3" \\
        --side "algo=appo parallel=distributed workers=4 env.id=LunarLander-v3 total_steps=2000000"
"""

from __future__ import annotations

import argparse
import shlex

from common import LoadSampler, fmt, machine, markdown_table, rotated, run_main_timed, wait_for_quiet


def time_to_score(overrides: list[str], score: float, timeout_s: float) -> dict:
    """One run of `overrides`: the first row at `score` (its env steps and seconds from launch,
    None where none reached it), the start-up, the last row's return and the load during it."""
    reached = lambda row: (row.get("episode_return_mean") or float("-inf")) >= score  # noqa: E731
    with LoadSampler() as load:
        run = run_main_timed(overrides, timeout_s=timeout_s, stop_when=reached, poll_s=0.05)
    if not run.rows:
        raise SystemExit(f"main.py {' '.join(overrides)} logged no row (exit {run.returncode}):\n{run.output[-3000:]}")
    first = next((i for i, row in enumerate(run.rows) if reached(row)), None)
    return {
        "steps": None if first is None else run.rows[first]["env_steps"],
        "seconds": None if first is None else run.arrivals[first],
        "startup_s": run.arrivals[0] - run.rows[0]["wall_time_s"],
        "last_return": run.rows[-1].get("episode_return_mean"),
        "last_steps": run.rows[-1]["env_steps"],
        "load": max(load.samples, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", action="append", required=True, help="main.py overrides, one string (repeat)")
    parser.add_argument("--score", type=float, required=True, help="training return (episode_return_mean) to reach")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run")
    parser.add_argument("--max-load", type=float, default=1.0, help="wait (at most 120 s) for a load under this")
    args = parser.parse_args()
    print(machine())
    sides = [shlex.split(side) for side in args.side]
    results: dict[tuple[int, int], dict] = {}
    for seed in args.seeds:
        for index in rotated(list(range(len(sides))), seed):
            wait_for_quiet(args.max_load, 120.0)
            results[index, seed] = result = time_to_score([*sides[index], f"seed={seed}"], args.score, args.timeout_s)
            print(f"side {index} seed {seed}: {result}", flush=True)
    header = ["command", "seed", f"env steps to {args.score:g}", "seconds from launch", "start-up s"]
    header += ["last row: steps, return", "load (max)"]
    rows = []
    for index, side in enumerate(args.side):
        for seed in args.seeds:
            r = results[index, seed]
            rows.append([f"`{side}`", seed, fmt(r["steps"], ","), fmt(r["seconds"], ".1f", "not reached"),
                         f"{r['startup_s']:.1f}", f"{r['last_steps']:,}, {fmt(r['last_return'], '.1f')}",
                         fmt(r["load"], ".1f")])
    print(markdown_table(header, rows))
    for seed in args.seeds:
        times = [results[index, seed]["seconds"] for index in range(len(sides))]
        best = min((t, i) for i, t in enumerate(times) if t is not None) if any(t is not None for t in times) else None
        print(f"RESULT seed {seed}: " + ("no side reached the score" if best is None else f"side {best[1]} first"))


if __name__ == "__main__":
    main()
