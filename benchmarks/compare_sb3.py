"""Wall-clock time to a return threshold: rlpar PPO vs Stable-Baselines3 PPO (RL-Zoo hyper-parameters).

Both are timed the same way: from the start of training (after imports and set-up) to the first
moment the mean return of the last 20 finished episodes reaches the threshold, on the same
machine, one after the other. Run from the repository root:

    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/compare_sb3.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASKS = {
    # RL-Zoo's tuned PPO hyper-parameters (rl-baselines3-zoo, hyperparams/ppo.yml)
    "cartpole": dict(
        env_id="CartPole-v1",
        threshold=475.0,
        budget=100_000,
        sb3=dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                 ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2"),
    ),
    "pendulum": dict(
        env_id="Pendulum-v1",
        threshold=-200.0,
        budget=100_000,
        sb3=dict(n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                 learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
    ),
}


def _linear(value: str):
    start = float(value.split("_")[1])
    return lambda progress_remaining: progress_remaining * start


def run_sb3(task: dict, seed: int) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    params = dict(task["sb3"])
    n_envs = params.pop("n_envs")
    for key in ("learning_rate", "clip_range"):
        if isinstance(params[key], str):
            params[key] = _linear(params[key])

    class Threshold(BaseCallback):
        def __init__(self):
            super().__init__()
            self.returns = deque(maxlen=20)
            self.reached = None

        def _on_training_start(self):
            self.start = time.perf_counter()

        def _on_step(self):
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.returns.append(info["episode"]["r"])
            if len(self.returns) and sum(self.returns) / len(self.returns) >= task["threshold"]:
                self.reached = (self.num_timesteps, time.perf_counter() - self.start)
                return False
            return True

    env = make_vec_env(task["env_id"], n_envs=n_envs, seed=seed)
    model = PPO("MlpPolicy", env, seed=seed, verbose=0, device="cpu", **params)
    callback = Threshold()
    start = time.perf_counter()
    model.learn(total_timesteps=task["budget"], callback=callback)
    elapsed = time.perf_counter() - start
    steps, seconds = callback.reached or (None, None)
    return {"steps": steps, "seconds": seconds, "run_seconds": elapsed}


def run_rlpar(name: str, task: dict, seed: int) -> dict:
    from rlpar.config.compose import compose_config
    from rlpar.runtime.build import build_trainer

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(compose_config([f"env={name}", f"seed={seed}", "progress=false"], run_dir=tmp))
        reached = None
        try:
            while trainer.env_steps < task["budget"] and not trainer.done:
                m = trainer.train()
                if m["episode_return_mean"] is not None and m["episode_return_mean"] >= task["threshold"]:
                    reached = (m["env_steps"], m["wall_time_s"])
                    break
        finally:
            trainer.close()
    steps, seconds = reached or (None, None)
    return {"steps": steps, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}")
    print("| task | seed | SB3 steps | SB3 s | rlpar steps | rlpar s | time ratio rlpar/SB3 |")
    print("|---|---|---|---|---|---|---|")
    for name in args.tasks:
        task = TASKS[name]
        for seed in args.seeds:
            ours = run_rlpar(name, task, seed)
            theirs = run_sb3(task, seed)
            ratio = ours["seconds"] / theirs["seconds"] if ours["seconds"] and theirs["seconds"] else None
            fmt = lambda v, f: "not reached" if v is None else format(v, f)
            print(f"| {task['env_id']} | {seed} | {fmt(theirs['steps'], ',')} | {fmt(theirs['seconds'], '.1f')} | "
                  f"{fmt(ours['steps'], ',')} | {fmt(ours['seconds'], '.2f')} | {fmt(ratio, '.3f')} |", flush=True)


if __name__ == "__main__":
    main()
