"""rlpar against Stable-Baselines3 on the same tasks and step budgets, each run a fresh process.

Two studies (`--study`):

* `threshold` (default): how many env steps and seconds each side takes to reach a mean return
  of the last 20 finished episodes (CartPole-v1: 475, Pendulum-v1: -200), with `--algo` ppo,
  a2c, dqn or sac. Sides:
  - `sb3`: SB3's algorithm with RL-Zoo's hyper-parameters for the task (RL_ZOO below),
    `torch.set_num_threads(1)` (its fastest setting on 2 cores), `device="cpu"`;
  - `rlpar-preset`: what `python main.py algo=<algo> env.id=<env> total_steps=<budget>` trains
    (the tuned preset, `parallel=local`, checkpoints and TensorBoard included);
  - `rlpar-zoo` (a2c): rlpar's A2C with RL-Zoo's settings (rlpar's value loss is half the
    squared error, so SB3's vf_coef 0.5 is rlpar's value_coef 1.0).
  Clocks: from the start of training (SB3's `_on_training_start`, rlpar's first iteration) to the
  threshold and to the end of the budget, in wall seconds and CPU seconds of the run's own
  process (on a shared machine the CPU time is what the run itself cost).
* `defaults`: does rlpar's *baseline* PPO (`python main.py env.id=<ID>`, no tuned preset) learn
  standard tasks without tuning? Sides: `rlpar-baseline` (exactly that command line; its warning
  lines kept), `sb3-default` (SB3's PPO defaults) and `sb3-zoo-style` (Box observations:
  `VecNormalize` and RL-Zoo's hyper-parameters, as RL-Zoo runs MuJoCo). Reported: the final and
  the best mean return of the last 20 training episodes, train seconds, env steps/s.

Stable-Baselines3 lives in its own environment, which sees the main .venv's packages (the same
torch, Gymnasium and numpy) through a .pth file:

    python3 -m venv benchmarks/.venv-sb3
    .venv/bin/python -c "import site; print(site.getsitepackages()[0])" \\
        > benchmarks/.venv-sb3/lib/python3.11/site-packages/rlpar-main-venv.pth
    benchmarks/.venv-sb3/bin/pip install pandas && benchmarks/.venv-sb3/bin/pip install --no-deps stable-baselines3==2.9.2 \
        sb3-contrib==2.9.2   # MaskablePPO: compare_maskable_ppo.py
    .venv/bin/pip install box2d==2.3.10 pygame-ce==2.5.8 mujoco==3.14.0 imageio==2.38.1   # defaults: Box2D, MuJoCo

Then, from the repository root (figures and the commands that made them: docs/benchmarks.md):

    .venv/bin/python benchmarks/compare_sb3.py --algo ppo --envs CartPole-v1 Pendulum-v1 --budget 100000
    .venv/bin/python benchmarks/compare_sb3.py --algo a2c --seeds 0 1 2
    .venv/bin/python benchmarks/compare_sb3.py --study defaults --seeds 0 1

Within a (seed, task) the order of the sides rotates, so that drift of a shared machine's speed
does not favour one side; before each run the driver waits (at most `--wait-s`) for the 1-minute
load average to fall under `--max-load`, and prints the load it started at. Every result is
appended to `--results` (JSON lines); `--table-only` prints the tables of that file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from common import RLPAR_PYTHON, ROOT, fmt, machine, markdown_table, report, result_of, rotated, run_main, wait_for_quiet

SB3_PYTHON = ROOT / "benchmarks" / ".venv-sb3" / "bin" / "python"
WINDOW = 20  # episodes in the mean, as rlpar's episode_return_mean
THRESHOLDS = {"CartPole-v1": 475.0, "Pendulum-v1": -200.0}
SIDES = {"threshold": ("sb3", "rlpar-preset", "rlpar-zoo"), "defaults": ("rlpar-baseline", "sb3-default", "sb3-zoo-style")}
DEFAULT_BUDGETS = {"Acrobot-v1": 100_000, "LunarLander-v3": 300_000, "Hopper-v5": 300_000, "HalfCheetah-v5": 300_000,
                   "MountainCarContinuous-v0": 100_000}
_MUJOCO_POLICY = {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
                  "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
# RL-Zoo's hyper-parameters (DLR-RM/rl-baselines3-zoo @ 208b6fdf, hyperparams/<algo>.yml): every
# key it sets but `normalize`, `policy` (MlpPolicy) and `n_timesteps` (the budget here).
RL_ZOO = {
    ("ppo", "CartPole-v1"): dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                                 ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2"),
    ("ppo", "Pendulum-v1"): dict(n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                                 learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
    ("a2c", "CartPole-v1"): dict(n_envs=8, ent_coef=0.0),  # SB3's defaults otherwise: 5 steps, lr 7e-4, RMSprop
    ("dqn", "CartPole-v1"): dict(n_envs=1, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
                                 gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                                 exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs={"net_arch": [256, 256]}),
    ("ppo", "Acrobot-v1"): dict(n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0),
    ("ppo", "LunarLander-v3"): dict(n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
                                    ent_coef=0.01),  # the LunarLander-v2 entry
    ("ppo", "Hopper-v5"): dict(n_envs=1, batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
                               ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7,
                               vf_coef=0.835671, policy_kwargs=_MUJOCO_POLICY),  # the Hopper-v4 entry
    ("ppo", "HalfCheetah-v5"): dict(n_envs=1, batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
                                    ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8,
                                    vf_coef=0.58096, policy_kwargs=_MUJOCO_POLICY),  # the HalfCheetah-v4 entry
    ("ppo", "MountainCarContinuous-v0"): dict(n_envs=1, batch_size=256, n_steps=8, gamma=0.9999, learning_rate=7.77e-05,
                                              ent_coef=0.00429, clip_range=0.1, n_epochs=10, gae_lambda=0.9,
                                              max_grad_norm=5, vf_coef=0.19, use_sde=True,
                                              policy_kwargs={"log_std_init": -3.29, "ortho_init": False}),
    ("sac", "Pendulum-v1"): dict(n_envs=1, learning_rate=1e-3),  # SB3's defaults otherwise: [256, 256], learning_starts 100
}
# rlpar's A2C with RL-Zoo's CartPole-v1 settings (every key that the preset would otherwise set).
RLPAR_ZOO_A2C = ["algo.rollout_length=5", "algo.lr=7e-4", "algo.anneal_lr=false", "algo.gamma=0.99",
                 "algo.entropy_coef=0.0", "algo.value_coef=1.0", "envs_per_worker=8"]


class Watch:
    """Returns of finished episodes and the clocks since training started (wall, and this
    process's CPU over all threads), as both sides count them."""

    def __init__(self, threshold: float | None):
        self.threshold, self.returns, self.episodes = threshold, deque(maxlen=WINDOW), 0
        self.reached, self.best = None, None
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def clocks(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu

    def mean(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    def episodes_done(self, returns, env_steps: int) -> None:
        self.returns.extend(float(r) for r in returns)
        self.episodes += len(returns)
        self.seen(self.mean(), env_steps)

    def seen(self, mean: float | None, env_steps: int, episodes: int | None = None) -> None:
        if mean is None:
            return
        if (episodes if episodes is not None else self.episodes) >= WINDOW and (self.best is None or mean > self.best):
            self.best = mean
        if self.reached is None and self.threshold is not None and mean >= self.threshold:
            self.reached = (env_steps, *self.clocks())

    def result(self, env_steps: int, final_return) -> dict:
        steps, wall, cpu = self.reached or (None, None, None)
        train_s, train_cpu_s = self.clocks()
        return {"steps_to_threshold": steps, "s_to_threshold": wall, "cpu_s_to_threshold": cpu, "env_steps": env_steps,
                "train_s": train_s, "train_cpu_s": train_cpu_s, "final_return": final_return, "best_return": self.best,
                "episodes": self.episodes}


# -- Stable-Baselines3 (runs in benchmarks/.venv-sb3) -------------------------------------------
def _schedule(value):
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value.split("_")[1])
        return lambda progress_remaining: progress_remaining * start
    return value


def run_sb3(algo: str, env_id: str, seed: int, budget: int, zoo: bool, normalize: bool) -> dict:
    import warnings

    import stable_baselines3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*mini-batch size.*")  # RL-Zoo's MountainCarContinuous: 256 > 8
    params = {key: _schedule(value) for key, value in RL_ZOO[(algo, env_id)].items()} if zoo else {"n_envs": 1}
    n_envs = params.pop("n_envs")
    if isinstance(params.get("policy_kwargs"), dict) and params["policy_kwargs"].get("activation_fn") == "relu":
        params["policy_kwargs"] = {**params["policy_kwargs"], "activation_fn": torch.nn.ReLU}
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:  # RL-Zoo passes the algorithm's gamma
        env = VecNormalize(env, norm_obs=True, norm_reward=True, gamma=params.get("gamma", 0.99))

    class Callback(BaseCallback):
        def _on_training_start(self):
            self.watch = Watch(THRESHOLDS.get(env_id))  # the clocks start with training, as rlpar's

        def _on_step(self):
            self.watch.episodes_done([i["episode"]["r"] for i in self.locals["infos"] if "episode" in i], self.num_timesteps)
            return True

    model = getattr(stable_baselines3, algo.upper())("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **params)
    callback = Callback()
    model.learn(total_timesteps=budget, callback=callback)
    return callback.watch.result(model.num_timesteps, callback.watch.mean())


# -- rlpar (in .venv) --------------------------------------------------------------------------
def run_rlpar_trainer(algo: str, env_id: str, seed: int, budget: int, overrides: list[str]) -> dict:
    """The preset's training in this process, with the clocks of `Watch` (threshold study)."""
    from rlpar.config.compose import compose_config
    from rlpar.runtime.build import build_trainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = compose_config([f"algo={algo}", f"env.id={env_id}", f"seed={seed}", f"total_steps={budget}",
                                 "progress=false", *overrides], run_dir=run_dir)
        trainer = build_trainer(config)
        watch, metrics = Watch(THRESHOLDS.get(env_id)), {}
        try:
            while not trainer.done:
                metrics = trainer.train()
                watch.seen(metrics["episode_return_mean"], metrics["env_steps"], metrics.get("episodes"))
            return watch.result(metrics["env_steps"], metrics["episode_return_mean"])
        finally:
            trainer.close()


def run_rlpar_command(env_id: str, seed: int, budget: int, run_root: Path) -> dict:
    """Exactly `main.py env.id=<ID> total_steps=<budget> seed=<seed>` (defaults study)."""
    run_dir = run_root / f"{env_id}_s{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, never a resume of an old one
    done, rows = run_main([f"env.id={env_id}", f"total_steps={budget}", f"seed={seed}"], run_dir, python=RLPAR_PYTHON)
    output = (done.stdout + "\n" + done.stderr).splitlines()
    if done.returncode != 0 or not rows:
        tail = [line for line in output if line.strip()][-15:]
        raise RuntimeError(f"rlpar {env_id} seed {seed} failed (exit {done.returncode}):\n" + "\n".join(tail))
    full = [r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None and r.get("episodes", 0) >= WINDOW]
    return {"env_steps": rows[-1]["env_steps"], "train_s": rows[-1]["wall_time_s"], "final_return": rows[-1]["episode_return_mean"],
            "best_return": max(full) if full else None, "episodes": rows[-1].get("episodes"),
            "warnings": [line.strip() for line in output if "warn" in line.lower() and line.strip()]}


def run_side(args) -> dict:
    if args.side == "rlpar-baseline":
        return run_rlpar_command(args.env, args.seed, args.budget, Path(args.results).parent)
    if args.side.startswith("rlpar"):
        return run_rlpar_trainer(args.algo, args.env, args.seed, args.budget,
                                 RLPAR_ZOO_A2C if args.side == "rlpar-zoo" else [])
    return run_sb3(args.algo, args.env, args.seed, args.budget, zoo=args.side in ("sb3", "sb3-zoo-style"),
                   normalize=args.side == "sb3-zoo-style")


# -- driver ------------------------------------------------------------------------------------
def sides_for(args, env_id: str) -> list[str]:
    sides = [s for s in (args.sides or SIDES[args.study]) if s in SIDES[args.study]]
    if args.study == "threshold":
        return [s for s in sides if s != "rlpar-zoo" or args.algo == "a2c"]
    return [s for s in sides if s != "sb3-zoo-style" or ("ppo", env_id) in RL_ZOO]


def budget_for(args, env_id: str) -> int:
    if args.budget:
        return args.budget
    return DEFAULT_BUDGETS.get(env_id, 100_000) if args.study == "defaults" else 300_000


def measure(args, side: str, env_id: str, seed: int) -> dict:
    load = wait_for_quiet(args.max_load, args.wait_s)
    budget = budget_for(args, env_id)
    python = SB3_PYTHON if side.startswith("sb3") else RLPAR_PYTHON
    command = [python, __file__, "--side", side, "--study", args.study, "--algo", args.algo, "--env", env_id,
               "--seed", seed, "--budget", budget, "--results", args.results]
    try:
        r = result_of(command)
        r["fps"] = r["env_steps"] / r["train_s"]
    except RuntimeError as err:
        print(f"# {err}", flush=True)
        r = {"error": str(err).splitlines()[-1] if str(err).strip() else "failed"}
    return {"study": args.study, "algo": args.algo, "env": env_id, "side": side, "seed": seed, "budget": budget,
            "load": load, **r}


def tables(rows: list[dict]) -> str:
    done = [r for r in rows if "error" not in r]
    per_run = markdown_table(
        ["task", "algo", "side", "seed", "load at start", "steps to threshold", "s to threshold (CPU s)", "train s (CPU s)",
         "env steps/s", "final return", "best 20-ep. mean", "rlpar warnings"],
        [[r["env"], r["algo"], r["side"], r["seed"], f"{r['load']:.2f}", fmt(r.get("steps_to_threshold"), ",", "not reached" if r["env"] in THRESHOLDS else "-"),
          f"{fmt(r.get('s_to_threshold'), '.2f')} ({fmt(r.get('cpu_s_to_threshold'), '.2f')})",
          f"{r['train_s']:.1f} ({fmt(r.get('train_cpu_s'), '.1f')})", f"{r['fps']:,.0f}", fmt(r["final_return"], ".1f"),
          fmt(r["best_return"], ".1f"), "; ".join(r.get("warnings") or [])] for r in done])
    groups = list(dict.fromkeys((r["env"], r["algo"], r["side"]) for r in done))
    median = lambda rows, key: statistics.median(r[key] for r in rows) if rows else None  # noqa: E731
    summary = []
    for env_id, algo, side in groups:
        mine = [r for r in done if (r["env"], r["algo"], r["side"]) == (env_id, algo, side)]
        reached = [r for r in mine if r.get("steps_to_threshold") is not None]
        summary.append([env_id, algo, side, f"{len(reached)}/{len(mine)}", fmt(median(reached, "steps_to_threshold"), ",.0f"),
                        fmt(median(reached, "s_to_threshold"), ".2f"), fmt(statistics.mean(finals), ".1f") if (finals := [r["final_return"] for r in mine if r["final_return"] is not None]) else "-",
                        f"{median(mine, 'fps'):,.0f}"])
    return per_run + "\n\nMedians over the seeds:\n\n" + markdown_table(
        ["task", "algo", "side", "seeds reaching the threshold", "steps to threshold", "s to threshold", "final return, mean",
         "env steps/s"], summary)


def driver(args) -> None:
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        print(f"# {machine()}; study {args.study}, algo {args.algo}", flush=True)
        envs = args.envs or (list(DEFAULT_BUDGETS) if args.study == "defaults" else ["CartPole-v1"])
        for seed in args.seeds:
            for i, env_id in enumerate(envs):
                for side in rotated(sides_for(args, env_id), seed + i):
                    r = measure(args, side, env_id, seed)
                    with results.open("a") as out:
                        out.write(json.dumps(r) + "\n")
                    print(f"# {env_id} {side} seed {seed}: " + (r["error"] if "error" in r else
                          f"final {fmt(r['final_return'], '.1f')}, {r['train_s']:.1f} s, {r['fps']:,.0f} steps/s"), flush=True)
    if results.exists():
        print(tables([json.loads(line) for line in results.read_text().splitlines() if line.strip()]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", choices=tuple(SIDES), default="threshold")
    parser.add_argument("--algo", choices=("ppo", "a2c", "dqn", "sac"), default="ppo", help="threshold study (defaults: ppo)")
    parser.add_argument("--envs", nargs="+", help="default: CartPole-v1 (threshold), five untuned tasks (defaults)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sides", nargs="+", help="some of the study's sides (e.g. all SB3 runs first)")
    parser.add_argument("--budget", type=int, help="env steps of every run (default: 300,000; defaults: per task)")
    parser.add_argument("--results", default="/tmp/compare_sb3/results.jsonl", help="JSON lines, appended to")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--max-load", type=float, default=1.0)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--side", help=argparse.SUPPRESS)  # one run, in the process the driver starts
    parser.add_argument("--env", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        report(run_side(args))
    else:
        driver(args)


if __name__ == "__main__":
    sys.exit(main())
