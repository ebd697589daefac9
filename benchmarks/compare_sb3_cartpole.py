"""CartPole-v1 A2C or DQN (`--algo`): rlpar against Stable-Baselines3 with RL-Zoo's settings, in one run.

Stable-Baselines3 lives in its own environment, which sees the main .venv's packages (the same
torch, Gymnasium and numpy) through a .pth file:

    python3 -m venv benchmarks/.venv-sb3
    .venv/bin/python -c "import site; print(site.getsitepackages()[0])" \\
        > benchmarks/.venv-sb3/lib/python3.11/site-packages/rlpar-main-venv.pth
    benchmarks/.venv-sb3/bin/pip install pandas && benchmarks/.venv-sb3/bin/pip install --no-deps stable-baselines3==2.9.2

Then, from the repository root:

    .venv/bin/python benchmarks/compare_sb3_cartpole.py --algo a2c --seeds 0 1 2
    .venv/bin/python benchmarks/compare_sb3_cartpole.py --algo dqn --seeds 0 1 2 --budget 100000

Three runs per seed, each in a fresh process, one after the other (their order rotates with the
seed, so that drift of this shared machine's speed does not favour one side):

* `sb3`: SB3's A2C with RL-Zoo's CartPole-v1 hyper-parameters (`hyperparams/a2c.yml`: 8
  environments, `ent_coef` 0, SB3's defaults otherwise: 5 steps, lr 7e-4, RMSprop alpha 0.99 eps
  1e-5, gamma 0.99, gae_lambda 1, vf_coef 0.5, max_grad_norm 0.5), `torch.set_num_threads(1)`
  (its fastest setting on 2 cores), `device="cpu"`.
* `rlpar-preset`: what `python main.py algo=a2c total_steps=<budget>` trains (the CartPole
  preset, `parallel=local`, one torch thread, checkpoints and TensorBoard included).
* `rlpar-zoo`: rlpar's A2C with RL-Zoo's settings above (rlpar's value loss is half the squared
  error, so SB3's vf_coef 0.5 is rlpar's value_coef 1.0).

With `--algo dqn`: `sb3` is SB3's DQN with RL-Zoo's CartPole-v1 settings (`hyperparams/dqn.yml`:
lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, gamma 0.99, target_update_interval 10,
train_freq 256, gradient_steps 128, exploration_fraction 0.16, exploration_final_eps 0.04,
net_arch [256, 256], one environment), one torch thread; `rlpar-preset` is what
`python main.py algo=dqn total_steps=<budget>` trains.

Each trains for the same number of env steps (`--budget`). Clocks: from the start of training
(after imports and set-up: SB3's `_on_training_start`, rlpar's first iteration) to the first
moment the mean return of the last 20 finished episodes reaches 475 ("s to 475"), and to the end
of the budget ("train s"; env steps/s = budget / train s, learning included), in wall-clock
seconds and, in brackets, in CPU seconds of the run's own process (all its threads): on a shared
machine the CPU time is what the run itself cost, while the wall clock also counts waiting for a
core. The summary gives medians over the seeds. Before each run the driver waits (at most
`--wait-s`) for the 1-minute load average to fall under `--max-load`, and records the load it
started at.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RLPAR_PYTHON = ROOT / ".venv" / "bin" / "python"
SB3_PYTHON = ROOT / "benchmarks" / ".venv-sb3" / "bin" / "python"
THRESHOLD = 475.0
WINDOW = 20  # episodes in the mean, as rlpar's episode_return_mean
# rlpar's A2C with RL-Zoo's CartPole-v1 settings (every key that the preset would otherwise set).
RLPAR_ZOO = ["algo.rollout_length=5", "algo.lr=7e-4", "algo.anneal_lr=false", "algo.gamma=0.99", "algo.entropy_coef=0.0",
             "algo.value_coef=1.0", "envs_per_worker=8"]
SIDES = {"a2c": ("sb3", "rlpar-preset", "rlpar-zoo"), "dqn": ("sb3", "rlpar-preset")}


class Clock:
    """Wall-clock and CPU seconds (this process, all threads) since training started: on a
    shared machine the CPU time is what the run itself cost."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def result(reached, env_steps: int, elapsed: tuple[float, float], final_return) -> dict:
    steps, wall, cpu = reached or (None, None, None)
    return {"steps_to_475": steps, "s_to_475": wall, "cpu_s_to_475": cpu, "env_steps": env_steps,
            "train_s": elapsed[0], "train_cpu_s": elapsed[1], "final_return": final_return}


def report(result: dict) -> None:
    print("RESULT " + json.dumps(result), flush=True)


# -- Stable-Baselines3 (runs in benchmarks/.venv-sb3) -------------------------------------------
def run_sb3(algo: str, seed: int, budget: int) -> dict:
    import torch
    from stable_baselines3 import A2C, DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)

    class Watch(BaseCallback):
        def _on_training_start(self):
            self.returns = deque(maxlen=WINDOW)
            self.reached = None
            self.clock = Clock()

        def _on_step(self):
            self.returns.extend(info["episode"]["r"] for info in self.locals["infos"] if "episode" in info)
            if self.reached is None and self.returns and sum(self.returns) / len(self.returns) >= THRESHOLD:
                self.reached = (self.num_timesteps, *self.clock.read())
            return True

    if algo == "a2c":  # RL-Zoo: CartPole-v1
        model = A2C("MlpPolicy", make_vec_env("CartPole-v1", n_envs=8, seed=seed), seed=seed, ent_coef=0.0, device="cpu",
                    verbose=0)
    else:
        model = DQN("MlpPolicy", make_vec_env("CartPole-v1", n_envs=1, seed=seed), seed=seed, learning_rate=2.3e-3,
                    batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99, target_update_interval=10,
                    train_freq=256, gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
                    policy_kwargs={"net_arch": [256, 256]}, device="cpu", verbose=0)
    watch = Watch()
    model.learn(total_timesteps=budget, callback=watch)
    final = sum(watch.returns) / len(watch.returns) if watch.returns else None
    return result(watch.reached, model.num_timesteps, watch.clock.read(), final)


# -- rlpar (runs in .venv) ---------------------------------------------------------------------
def run_rlpar(algo: str, seed: int, budget: int, overrides: list[str]) -> dict:
    sys.path.insert(0, str(ROOT))
    from rlpar.config.compose import compose_config
    from rlpar.runtime.build import build_trainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = compose_config([f"algo={algo}", f"seed={seed}", f"total_steps={budget}", "progress=false", *overrides],
                                run_dir=run_dir)
        trainer = build_trainer(config)
        reached, metrics, clock = None, {}, Clock()
        try:
            while not trainer.done:
                metrics = trainer.train()
                if reached is None and (metrics["episode_return_mean"] or 0.0) >= THRESHOLD:
                    reached = (metrics["env_steps"], *clock.read())
            elapsed = clock.read()
        finally:
            trainer.close()
    return result(reached, metrics["env_steps"], elapsed, metrics["episode_return_mean"])


# -- driver ------------------------------------------------------------------------------------
def wait_for_quiet(max_load: float, wait_s: float) -> float:
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(2.0)
    return os.getloadavg()[0]


def measure(side: str, seed: int, args) -> dict:
    python = SB3_PYTHON if side == "sb3" else RLPAR_PYTHON
    command = [str(python), __file__, side, "--algo", args.algo, "--seed", str(seed), "--budget", str(args.budget)]
    load = wait_for_quiet(args.max_load, args.wait_s)
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{side} seed {seed} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {"side": side, "seed": seed, "load": load, **json.loads(lines[-1][len("RESULT "):])}


def fmt(value, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def driver(args) -> None:
    import torch

    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, torch {torch.__version__}; {args.algo}, budget {args.budget:,} env steps", flush=True)
    print("| seed | run | load at start | steps to 475 | s to 475 (CPU s) | train s (CPU s) | env steps/s (per CPU s) "
          "| final return |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    results = []
    for seed in args.seeds:
        sides = SIDES[args.algo]
        shift = seed % len(sides)
        for side in sides[shift:] + sides[:shift]:
            r = measure(side, seed, args)
            r["fps"], r["cpu_fps"] = r["env_steps"] / r["train_s"], r["env_steps"] / r["train_cpu_s"]
            results.append(r)
            print(f"| {seed} | {side} | {r['load']:.2f} | {fmt(r['steps_to_475'], ',')} | {fmt(r['s_to_475'], '.2f')} "
                  f"({fmt(r['cpu_s_to_475'], '.2f')}) | {r['train_s']:.1f} ({r['train_cpu_s']:.1f}) | {r['fps']:,.0f} "
                  f"({r['cpu_fps']:,.0f}) | {fmt(r['final_return'], '.1f')} |", flush=True)
    print("\n| run | seeds reaching 475 | steps to 475 | s to 475 (CPU s) | env steps/s (per CPU s) |")
    print("|---|---|---|---|---|")
    for side in SIDES[args.algo]:  # medians over the seeds
        mine = [r for r in results if r["side"] == side]
        reached = [r for r in mine if r["steps_to_475"] is not None]
        median = lambda key, rows=reached: statistics.median(r[key] for r in rows) if rows else None  # noqa: E731
        print(f"| {side} | {len(reached)}/{len(mine)} | {fmt(median('steps_to_475'), ',.0f')} | "
              f"{fmt(median('s_to_475'), '.2f')} ({fmt(median('cpu_s_to_475'), '.2f')}) | "
              f"{median('fps', mine):,.0f} ({median('cpu_fps', mine):,.0f}) |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="driver", choices=("driver", *SIDES["a2c"]))
    parser.add_argument("--algo", choices=tuple(SIDES), default="a2c")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=300_000)
    parser.add_argument("--max-load", type=float, default=1.0)
    parser.add_argument("--wait-s", type=float, default=60.0)
    args = parser.parse_args()
    if args.mode == "driver":
        driver(args)
    elif args.mode == "sb3":
        report(run_sb3(args.algo, args.seed, args.budget))
    else:
        report(run_rlpar(args.algo, args.seed, args.budget, RLPAR_ZOO if args.mode == "rlpar-zoo" else []))


if __name__ == "__main__":
    main()
