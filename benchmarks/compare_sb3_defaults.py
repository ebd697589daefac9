"""Defaults on untuned tasks: rlpar's PPO baseline against Stable-Baselines3 PPO, same step budgets.

Does rlpar's *baseline* PPO (what `python main.py env.id=<ID>` trains for an environment that has
no tuned preset in conf/preset/ppo/) learn standard Gymnasium tasks without tuning? Three sides,
each trained for the same number of env steps per task:

* `rlpar-baseline`: exactly the command line

      .venv/bin/python main.py env.id=<ID> total_steps=<budget> seed=<seed> progress=false \\
          run_dir=/tmp/defaults_bench/<ID>_s<seed>

  (conf/algo/ppo.yaml: 8 envs x 128 steps, lr 3e-4, 10 epochs of minibatch 64, entropy 0.01;
  `parallel=local`, checkpoints and TensorBoard included). The driver reads
  `<run_dir>/metrics.jsonl` back and keeps every warning line that rlpar printed (e.g. its
  entropy-collapse warning on MountainCarContinuous-v0).
* `sb3-default`: SB3's PPO with its default hyper-parameters (one environment, n_steps 2048,
  batch 64, 10 epochs, lr 3e-4, ent_coef 0), `torch.set_num_threads(1)` (its fastest setting on
  2 cores), `device="cpu"`.
* `sb3-zoo-style` (Box-observation tasks): SB3's PPO in `VecNormalize(norm_obs=True,
  norm_reward=True, gamma=<the algorithm's gamma>)` as RL-Zoo does for MuJoCo, with RL-Zoo's
  hyper-parameters for the task (`hyperparams/ppo.yml` of DLR-RM/rl-baselines3-zoo, commit
  208b6fdf: `Acrobot-v1`, `LunarLander-v2` (no -v3 entry; RL-Zoo does not normalise LunarLander,
  this side does), `Hopper-v4`, `HalfCheetah-v4`, `MountainCarContinuous-v0`; see ZOO below), one
  torch thread, `device="cpu"`.

Stable-Baselines3 lives in its own environment, which sees the main .venv's packages (torch,
Gymnasium, numpy, box2d, mujoco) through a .pth file, as in benchmarks/compare_sb3_cartpole.py:

    python3 -m venv benchmarks/.venv-sb3
    .venv/bin/python -c "import site; print(site.getsitepackages()[0])" \\
        > benchmarks/.venv-sb3/lib/python3.11/site-packages/rlpar-main-venv.pth
    benchmarks/.venv-sb3/bin/pip install pandas && benchmarks/.venv-sb3/bin/pip install --no-deps stable-baselines3==2.9.2
    .venv/bin/pip install box2d==2.3.10 pygame-ce==2.5.8 mujoco==3.14.0 imageio==2.38.1   # Box2D, MuJoCo

Then, from the repository root:

    .venv/bin/python benchmarks/compare_sb3_defaults.py --seeds 0 1

Every run is a fresh process, one after the other; within a (seed, task) the order of the sides
rotates, so that drift of this shared machine's speed does not favour one side. Before each run
the driver waits (at most `--wait-s`) for the 1-minute load average to fall under `--max-load`,
and records the load it started at. `--sides` runs only some sides (e.g. all SB3 runs first, then
rlpar), `--wait-for FILE` polls every 30 s (at most `--wait-for-max-s`) for FILE before the first
rlpar run; every result is appended to `--results` (JSON lines) and the table is printed from all
the rows in that file (`--table-only` prints it without running anything).

Reported per (task, side, seed): the mean return of the last 20 finished training episodes at the
end ("final"), the best such mean over training, counted once 20 episodes have finished ("best"),
wall seconds of training (SB3: from `_on_training_start`; rlpar: `wall_time_s` of the last row,
from its first iteration; imports and set-up excluded on both sides) and env steps/s = env steps /
train s (learning included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RLPAR_PYTHON = ROOT / ".venv" / "bin" / "python"
SB3_PYTHON = ROOT / "benchmarks" / ".venv-sb3" / "bin" / "python"
RUN_ROOT = Path("/tmp/defaults_bench")
WINDOW = 20  # episodes in the mean, as rlpar's episode_return_mean
BUDGETS = {"Acrobot-v1": 100_000, "LunarLander-v3": 300_000, "Hopper-v5": 300_000, "HalfCheetah-v5": 300_000,
           "MountainCarContinuous-v0": 100_000}
SIDES = ("rlpar-baseline", "sb3-default", "sb3-zoo-style")
_MUJOCO_POLICY = {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
                  "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
# RL-Zoo hyperparams/ppo.yml (DLR-RM/rl-baselines3-zoo @ 208b6fdf), every key it sets but
# `normalize` (always on here), `policy` (MlpPolicy) and `n_timesteps` (our budget).
ZOO = {
    "Acrobot-v1": dict(n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0),
    "LunarLander-v3": dict(n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
                           ent_coef=0.01),  # the LunarLander-v2 entry
    "Hopper-v5": dict(n_envs=1, batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
                      ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7,
                      vf_coef=0.835671, policy_kwargs=_MUJOCO_POLICY),  # the Hopper-v4 entry
    "HalfCheetah-v5": dict(n_envs=1, batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
                           ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8,
                           vf_coef=0.58096, policy_kwargs=_MUJOCO_POLICY),  # the HalfCheetah-v4 entry
    "MountainCarContinuous-v0": dict(n_envs=1, batch_size=256, n_steps=8, gamma=0.9999, learning_rate=7.77e-05,
                                     ent_coef=0.00429, clip_range=0.1, n_epochs=10, gae_lambda=0.9,
                                     max_grad_norm=5, vf_coef=0.19, use_sde=True,
                                     policy_kwargs={"log_std_init": -3.29, "ortho_init": False}),
}


def report(result: dict) -> None:
    print("RESULT " + json.dumps(result), flush=True)


# -- Stable-Baselines3 (runs in benchmarks/.venv-sb3) -------------------------------------------
def run_sb3(env_id: str, seed: int, budget: int, zoo: bool) -> dict:
    import warnings

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*mini-batch size.*")  # RL-Zoo's MountainCarContinuous: 256 > 8

    class Watch(BaseCallback):
        def _on_training_start(self):
            self.returns, self.episodes, self.best = deque(maxlen=WINDOW), 0, None
            self.start = time.perf_counter()

        def _on_step(self):
            done = [info["episode"]["r"] for info in self.locals["infos"] if "episode" in info]
            if done:
                self.returns.extend(float(r) for r in done)
                self.episodes += len(done)
                mean = sum(self.returns) / len(self.returns)
                if self.episodes >= WINDOW and (self.best is None or mean > self.best):
                    self.best = mean
            return True

    if zoo:
        params = dict(ZOO[env_id])
        n_envs = params.pop("n_envs")
        kwargs = params.pop("policy_kwargs", None)
        if kwargs is not None:
            kwargs = dict(kwargs)
            if kwargs.get("activation_fn") == "relu":
                kwargs["activation_fn"] = torch.nn.ReLU
            params["policy_kwargs"] = kwargs
        env = VecNormalize(make_vec_env(env_id, n_envs=n_envs, seed=seed), norm_obs=True, norm_reward=True,
                           gamma=params.get("gamma", 0.99))  # RL-Zoo passes the algorithm's gamma
    else:
        params = {}
        env = make_vec_env(env_id, n_envs=1, seed=seed)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **params)
    watch = Watch()
    model.learn(total_timesteps=budget, callback=watch)
    train_s = time.perf_counter() - watch.start
    final = sum(watch.returns) / len(watch.returns) if watch.returns else None
    return {"env_steps": model.num_timesteps, "train_s": train_s, "final_return": final, "best_return": watch.best,
            "episodes": watch.episodes, "warnings": []}


# -- rlpar (the command line, in .venv) ----------------------------------------------------------
def rlpar_command(env_id: str, seed: int, budget: int) -> tuple[list[str], Path]:
    run_dir = RUN_ROOT / f"{env_id}_s{seed}"
    return ([str(RLPAR_PYTHON), "main.py", f"env.id={env_id}", f"total_steps={budget}", f"seed={seed}",
             "progress=false", f"run_dir={run_dir}"], run_dir)


def run_rlpar(env_id: str, seed: int, budget: int) -> dict:
    command, run_dir = rlpar_command(env_id, seed, budget)
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, never a resume of an old one
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    process_s = time.perf_counter() - started
    output = (done.stdout + "\n" + done.stderr).splitlines()
    warnings = [line.strip() for line in output if "warn" in line.lower() and line.strip()]
    if not warnings and (run_dir / "main.log").exists():  # the console should carry them; main.log to be sure
        warnings = [line.strip() for line in (run_dir / "main.log").read_text().splitlines() if "warn" in line.lower()]
    rows = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if done.returncode != 0 or not rows:
        tail = [line for line in output if line.strip()][-15:]
        raise RuntimeError(f"rlpar {env_id} seed {seed} failed (exit {done.returncode}):\n" + "\n".join(tail))
    last = rows[-1]
    full = [r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None
            and r.get("episodes", 0) >= WINDOW]
    return {"env_steps": last["env_steps"], "train_s": last["wall_time_s"], "process_s": process_s,
            "final_return": last["episode_return_mean"], "best_return": max(full) if full else None,
            "episodes": last.get("episodes"), "policy_std": last.get("policy_std"), "warnings": warnings,
            "command": " ".join(command[1:])}


# -- driver ------------------------------------------------------------------------------------
def wait_for_quiet(max_load: float, wait_s: float) -> float:
    deadline = time.monotonic() + wait_s
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        time.sleep(2.0)
    return os.getloadavg()[0]


def wait_for_file(path: str | None, max_s: float) -> str:
    if not path:
        return "not asked"
    started = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - started >= max_s:
            print(f"# {path} not there after {max_s / 60:.0f} min: running rlpar anyway", flush=True)
            return f"absent after {max_s:.0f} s"
        time.sleep(30.0)
    waited = time.monotonic() - started
    print(f"# {path} present (waited {waited:.0f} s) at {time.strftime('%H:%M:%S')}", flush=True)
    return f"present after {waited:.0f} s"


def measure(side: str, env_id: str, seed: int, budget: int, args) -> dict:
    load = wait_for_quiet(args.max_load, args.wait_s)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        if side == "rlpar-baseline":
            r = run_rlpar(env_id, seed, budget)
        else:
            command = [str(SB3_PYTHON), __file__, side, "--env", env_id, "--seed", str(seed), "--budget", str(budget)]
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"{side} {env_id} seed {seed} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            r = json.loads(lines[-1][len("RESULT "):])
        r["fps"] = r["env_steps"] / r["train_s"]
    except RuntimeError as err:
        print(f"# {err}", flush=True)
        r = {"error": str(err).splitlines()[-1] if str(err).strip() else "failed", "error_text": str(err)}
    return {"env": env_id, "side": side, "seed": seed, "budget": budget, "load": load, "started": started, **r}


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict]) -> None:
    print("| task | budget | side | seed | load at start | final return (last 20) | best 20-ep. mean | train s "
          "| env steps/s | rlpar warning |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    envs = list(dict.fromkeys(r["env"] for r in rows))
    for env_id in sorted(envs, key=lambda e: list(BUDGETS).index(e) if e in BUDGETS else 99):
        for side in SIDES:
            for r in sorted((r for r in rows if r["env"] == env_id and r["side"] == side), key=lambda r: r["seed"]):
                if "error" in r:
                    print(f"| {env_id} | {r['budget']:,} | {side} | {r['seed']} | {r['load']:.2f} | failed: "
                          f"`{r['error']}` | | | | |")
                    continue
                warn = "; ".join(r.get("warnings") or []) or ("none" if side == "rlpar-baseline" else "")
                print(f"| {env_id} | {r['budget']:,} | {side} | {r['seed']} | {r['load']:.2f} | "
                      f"{fmt(r['final_return'], '.1f')} | {fmt(r['best_return'], '.1f')} | {r['train_s']:.0f} | "
                      f"{r['fps']:,.0f} | {warn} |")
    print("\n| task | side | final return, mean of seeds | best 20-ep. mean, mean of seeds | env steps/s, median |")
    print("|---|---|---|---|---|")
    for env_id in sorted(envs, key=lambda e: list(BUDGETS).index(e) if e in BUDGETS else 99):
        for side in SIDES:
            mine = [r for r in rows if r["env"] == env_id and r["side"] == side and "error" not in r]
            if not mine:
                continue
            mean = lambda key: statistics.mean(r[key] for r in mine) if all(r[key] is not None for r in mine) else None  # noqa: E731
            print(f"| {env_id} | {side} | {fmt(mean('final_return'), '.1f')} | {fmt(mean('best_return'), '.1f')} | "
                  f"{statistics.median(r['fps'] for r in mine):,.0f} |")


def driver(args) -> None:
    budgets = dict(BUDGETS)
    for item in args.budget_overrides or []:
        if "=" in item:
            env_id, steps = item.split("=", 1)
            budgets[env_id] = int(float(steps))
        else:
            budgets = {env_id: int(float(item)) for env_id in budgets}
    results_path = Path(args.results)
    if not args.table_only:
        import torch

        print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()}, {os.cpu_count()} CPUs, python "
              f"{platform.python_version()}, torch {torch.__version__}; sides {', '.join(args.sides)}; budgets "
              + ", ".join(f"{e} {budgets[e]:,}" for e in args.envs), flush=True)
        flag = None
        for seed in args.seeds:
            for i, env_id in enumerate(args.envs):
                sides = [s for s in args.sides if s != "sb3-zoo-style" or env_id in ZOO]
                shift = (seed + i) % len(sides)
                for side in sides[shift:] + sides[:shift]:
                    if side == "rlpar-baseline" and flag is None:
                        flag = wait_for_file(args.wait_for, args.wait_for_max_s)
                    r = measure(side, env_id, seed, budgets[env_id], args)
                    r["wait_for"] = flag if side == "rlpar-baseline" else None
                    with results_path.open("a") as out:
                        out.write(json.dumps(r) + "\n")
                    print(f"# {r['started']} {env_id} {side} seed {seed}: "
                          + (r["error"] if "error" in r else f"final {fmt(r['final_return'], '.1f')}, best "
                             f"{fmt(r['best_return'], '.1f')}, {r['train_s']:.0f} s, {r['fps']:,.0f} steps/s"
                             + (f", warnings: {r['warnings']}" if r.get("warnings") else "")), flush=True)
    if results_path.exists():
        print_table([json.loads(line) for line in results_path.read_text().splitlines() if line.strip()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="driver", choices=("driver", "sb3-default", "sb3-zoo-style"))
    parser.add_argument("--envs", nargs="+", default=list(BUDGETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--budget", dest="budget_overrides", nargs="+", default=None,
                        help="driver: STEPS for every task, or ENV=STEPS ...; a side: the steps")
    parser.add_argument("--env", default="Acrobot-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(RUN_ROOT / "results.jsonl"))
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--wait-for", default=None, help="a file that must exist before the first rlpar run")
    parser.add_argument("--wait-for-max-s", type=float, default=40 * 60)
    parser.add_argument("--max-load", type=float, default=1.0)
    parser.add_argument("--wait-s", type=float, default=20.0)
    args = parser.parse_args()
    if args.mode == "driver":
        RUN_ROOT.mkdir(parents=True, exist_ok=True)
        driver(args)
    else:
        budget = int(float(args.budget_overrides[0])) if args.budget_overrides else BUDGETS[args.env]
        report(run_sb3(args.env, args.seed, budget, zoo=args.mode == "sb3-zoo-style"))


if __name__ == "__main__":
    main()
