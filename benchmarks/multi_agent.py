"""The multi-agent reference table: IPPO and MAPPO on mpe2's simple_spread (N=3, 25 cycles,
local_ratio 0.5, discrete actions) against a random policy and a scripted one, in one reward
convention: the team's return, the sum over agents of each agent's episode return.

    .venv/bin/python benchmarks/multi_agent.py                       # baselines, then both algorithms, seeds 0 1 2
    .venv/bin/python benchmarks/multi_agent.py --algos mappo --seeds 0 --steps 2000000
    .venv/bin/python benchmarks/multi_agent.py --baselines-only

Each training run is what a user types: `python main.py env=pettingzoo env.id=mpe2.simple_spread_v3
algo=A parallel=distributed workers=4 seed=S total_steps=T`. A run's team return is the mean over
its iteration's finished episodes (`team_return_mean`, about 128 episodes an iteration with the
defaults); the table gives the env steps and seconds at which it first reaches -50, and the mean
over the last 10 iterations. The random and scripted policies are measured over 200 episodes
(seeds 0-199). `--jobs 2` trains two runs at once (each then slower).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from common import machine, markdown_table, run_main

THRESHOLD = -50.0
LAST = 10  # iterations averaged for the final figure


def team_returns(policy, episodes: int = 200) -> list[float]:
    """Team returns of `policy(observations, rng) -> actions` on simple_spread_v3's defaults."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env()
    rng = np.random.default_rng(0)
    totals = []
    for seed in range(episodes):
        observations, _ = env.reset(seed=seed)
        total = 0.0
        while env.agents:
            observations, rewards, _, _, _ = env.step(policy(observations, rng))
            total += sum(rewards.values())
        totals.append(total)
    env.close()
    return totals


def random_policy(observations, rng):
    return {agent: int(rng.integers(5)) for agent in observations}


def scripted_policy(observations, rng):
    """Each agent to its own landmark, by the assignment with the least total distance; each
    step it pushes along the axis where it is farthest from its landmark (actions: 0 none,
    1 -x, 2 +x, 3 -y, 4 +y). An agent's row: its velocity, position, then landmarks relative to it."""
    agents = sorted(observations)
    n = len(agents)
    relative = {a: observations[a][4:4 + 2 * n].reshape(n, 2) for a in agents}
    best = min(itertools.permutations(range(n)),
               key=lambda landmarks: sum(np.linalg.norm(relative[a][l]) for a, l in zip(agents, landmarks)))
    actions = {}
    for agent, landmark in zip(agents, best):
        offset = relative[agent][landmark] - 0.5 * observations[agent][:2]  # brake: mind the velocity
        axis = int(np.argmax(np.abs(offset)))
        actions[agent] = 0 if np.abs(offset).max() < 0.02 else 1 + 2 * axis + int(offset[axis] > 0)
    return actions


def train(algo: str, seed: int, steps: int, workdir: Path) -> dict:
    overrides = ["env=pettingzoo", "env.id=mpe2.simple_spread_v3", f"algo={algo}", "parallel=distributed", "workers=4",
                 f"seed={seed}", f"total_steps={steps}"]
    done, rows = run_main(overrides, workdir / f"{algo}_s{seed}")
    if done.returncode != 0:
        raise RuntimeError(f"{algo} seed {seed} failed:\n{done.stderr[-2000:]}")
    reached = next((r for r in rows if r.get("team_return_mean", -1e9) >= THRESHOLD), None)
    return {"algo": algo, "seed": seed, "steps_to_threshold": reached and reached["env_steps"],
            "seconds_to_threshold": reached and reached["wall_time_s"],
            "final": statistics.mean(r["team_return_mean"] for r in rows[-LAST:] if "team_return_mean" in r),
            "best": max(r.get("team_return_mean", -1e9) for r in rows), "seconds": rows[-1]["wall_time_s"],
            "env_steps": rows[-1]["env_steps"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["ippo", "mappo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--baselines-only", action="store_true")
    args = parser.parse_args()
    print(machine(), flush=True)
    rows = []
    for name, policy in (("random", random_policy), ("scripted (best assignment)", scripted_policy)):
        returns = team_returns(policy)
        rows.append([name, "-", "-", "-", f"{np.mean(returns):.1f} (std {np.std(returns):.1f}, 200 episodes)", "-"])
        print(rows[-1], flush=True)
    if not args.baselines_only:
        with tempfile.TemporaryDirectory(prefix="rlpar-multi-agent-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
            runs = [(algo, seed) for algo in args.algos for seed in args.seeds]
            for result in pool.map(lambda run: train(*run, args.steps, Path(tmp)), runs):
                steps, seconds = result["steps_to_threshold"], result["seconds_to_threshold"]
                rows.append([result["algo"], result["seed"], "-" if steps is None else f"{steps:,}",
                             "-" if seconds is None else f"{seconds:.0f}",
                             f"{result['final']:.1f} (best {result['best']:.1f})",
                             f"{result['seconds']:.0f} s for {result['env_steps']:,}"])
                print(rows[-1], flush=True)
    print(markdown_table(["policy", "seed", f"env steps to {THRESHOLD:.0f}", "seconds to it",
                          f"team return (last {LAST} iterations)", "wall time"], rows))


if __name__ == "__main__":
    main()
