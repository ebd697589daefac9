"""rlpar's PPO against SB3-contrib's MaskablePPO on one masked environment, each run a fresh process.

The task is tests/masked_envs.py's MaskedChoices: 6 actions, a random half of them legal each step
(at least one), a pointer at one legal action that earns 1 (another legal action 0; a masked one
-10 and the episode's end), 20 steps an episode, so a return of 20 is perfect and uniformly random
legal play earns about 8. Both sides see the same information: rlpar the Dict observation
(the mask rides in it and the network does not read it), SB3-contrib the pointer alone, with the
mask handed through `action_masks()` (its ActionMasker wrapper).

Both sides learn with the same PPO hyper-parameters (SB3's PPO defaults: 2 x 64 tanh MLPs,
lr 3e-4, 10 epochs of minibatches of 64, gamma 0.99, GAE 0.95, clip 0.2, no entropy bonus, grad
norm 0.5; 8 environments x 128 steps a batch; SB3's vf_coef 0.5 is rlpar's value_coef 1.0, whose
value loss is half the squared error), no observation or reward normalisation, each side in its
fastest execution on this machine: SB3 with `torch.set_num_threads(1)` and its in-process
DummyVecEnv, rlpar `parallel=local` (its environments in the learner's process, numpy acting
copy, 1 torch thread). Measured from the start of training: env steps/s over the budget, the mean
return of the last 20 episodes at its end, steps and seconds to a mean of `--threshold`, and the
masked actions taken (counted by the environment).

SB3-contrib lives in SB3's environment (compare_sb3.py's docstring), installed beside it:

    benchmarks/.venv-sb3/bin/pip install --no-deps sb3-contrib==2.9.2

Then, from the repository root (figures: docs/action_masks.md):

    .venv/bin/python benchmarks/compare_maskable_ppo.py --seeds 0 1 --budget 100000

The order of the sides rotates with the seed; before each run the driver waits (at most
`--wait-s`) for the 1-minute load average to fall under `--max-load`, and prints the load it
started at. Results are appended to `--results` (JSON lines); `--table-only` prints its tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from common import RLPAR_PYTHON, fmt, machine, markdown_table, report, result_of, rotated, wait_for_quiet
from compare_sb3 import SB3_PYTHON, Watch

SIDES = ("sb3-contrib", "rlpar")
ENTRY_POINT = "tests.masked_envs:MaskedChoices"
# The PPO both sides learn with (SB3's names; RLPAR_PPO below is the same in rlpar's keys).
PPO = dict(n_envs=8, n_steps=128, batch_size=64, n_epochs=10, learning_rate=3e-4, gamma=0.99, gae_lambda=0.95,
           clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5)
RLPAR_PPO = ["algo=ppo", f"env.entry_point={ENTRY_POINT}", "parallel=local", "workers=1", "envs_per_worker=8",
             "algo.rollout_length=128", "algo.minibatch_size=64", "algo.epochs=10", "algo.lr=3e-4", "algo.gamma=0.99",
             "algo.gae_lambda=0.95", "algo.clip=0.2", "algo.entropy_coef=0.0", "algo.value_coef=1.0",
             "algo.max_grad_norm=0.5", "algo.normalize_rewards=false", "algo.compile=false",
             "model.hidden_sizes=[64,64]", "model.activation=tanh", "model.normalize_obs=false", "checkpoint.every=0",
             "progress=false"]


def run_sb3_contrib(seed: int, budget: int, threshold: float) -> dict:
    import gymnasium as gym
    import torch
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.wrappers import ActionMasker
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from tests.masked_envs import MaskedChoices

    torch.set_num_threads(1)

    record = Path(tempfile.mkdtemp()) / "masked.txt"

    def make():
        env = gym.wrappers.TransformObservation(MaskedChoices(record=str(record)), lambda obs: obs["obs"],
                                                MaskedChoices().observation_space["obs"])
        return ActionMasker(env, lambda env: env.unwrapped.mask.astype(bool))

    params = dict(PPO)
    env = make_vec_env(make, n_envs=params.pop("n_envs"), seed=seed)

    class Callback(BaseCallback):
        def _on_training_start(self):
            self.watch = Watch(threshold)

        def _on_step(self):
            returns = [info["episode"]["r"] for info in self.locals["infos"] if "episode" in info]
            self.watch.episodes_done(returns, self.num_timesteps)
            return True

    model = MaskablePPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **params)
    callback = Callback()
    model.learn(total_timesteps=budget, callback=callback)
    return {**callback.watch.result(model.num_timesteps, callback.watch.mean()), "masked_taken": masked_taken(record)}


def masked_taken(record: Path) -> int:
    """Masked actions the environments were sent: a line each in `record` (tests/masked_envs.py),
    wherever they ran."""
    return record.read_text().count("\n") if record.exists() else 0


def run_rlpar(seed: int, budget: int, threshold: float, overrides: list[str]) -> dict:
    from rlpar.config.compose import compose_config
    from rlpar.runtime.build import build_trainer

    with tempfile.TemporaryDirectory() as run_dir:
        record = Path(run_dir) / "masked.txt"
        config = compose_config([*RLPAR_PPO, f"+env.kwargs.record={record}", f"seed={seed}", f"total_steps={budget}",
                                 *overrides], run_dir=str(Path(run_dir) / "run"))
        trainer = build_trainer(config)  # no validation probe: its random steps are not training's
        watch, metrics = Watch(threshold), {}
        try:
            while not trainer.done:
                metrics = trainer.train()
                watch.seen(metrics["episode_return_mean"], metrics["env_steps"], metrics.get("episodes"))
        finally:
            trainer.close()
        result = watch.result(metrics["env_steps"], metrics["episode_return_mean"])
        return {**result, "masked_taken": masked_taken(record)}


def measure(args, side: str, seed: int) -> dict:
    load = wait_for_quiet(args.max_load, args.wait_s)
    python = SB3_PYTHON if side == "sb3-contrib" else RLPAR_PYTHON
    command = [python, __file__, "--side", side, "--seed", seed, "--budget", args.budget, "--threshold", args.threshold,
               "--rlpar-overrides", *args.rlpar_overrides]
    try:
        r = result_of(command)
        r["fps"] = r["env_steps"] / r["train_s"]
    except RuntimeError as err:
        print(f"# {err}", flush=True)
        r = {"error": str(err).splitlines()[-1] if str(err).strip() else "failed"}
    return {"side": side, "seed": seed, "budget": args.budget, "threshold": args.threshold, "load": load,
            "rlpar_overrides": args.rlpar_overrides if side == "rlpar" else [], **r}


def label(r: dict) -> str:
    return r["side"] + (f" {' '.join(r['rlpar_overrides'])}" if r.get("rlpar_overrides") else "")


def tables(rows: list[dict]) -> str:
    done = [r for r in rows if "error" not in r]
    per_run = markdown_table(
        ["side", "seed", "load at start", "env steps", "train s (CPU s)", "env steps/s", "final return (last 20 ep.)",
         "steps to threshold", "s to threshold", "masked actions taken"],
        [[label(r), r["seed"],
          f"{r['load']:.2f}", f"{r['env_steps']:,}", f"{r['train_s']:.1f} ({fmt(r.get('train_cpu_s'), '.1f')})",
          f"{r['fps']:,.0f}", fmt(r["final_return"], ".2f"), fmt(r.get("steps_to_threshold"), ",", "not reached"),
          fmt(r.get("s_to_threshold"), ".1f"), r["masked_taken"]] for r in done])
    summary = []
    for side in dict.fromkeys(map(label, done)):
        mine = [r for r in done if label(r) == side]
        reached = [r["s_to_threshold"] for r in mine if r.get("s_to_threshold") is not None]
        summary.append([side, len(mine), f"{statistics.median(r['fps'] for r in mine):,.0f}",
                        f"{statistics.mean(r['final_return'] for r in mine):.2f}",
                        f"{len(reached)}/{len(mine)}", fmt(statistics.median(reached) if reached else None, ".1f"),
                        sum(r["masked_taken"] for r in mine)])
    return per_run + "\n\nOver the seeds:\n\n" + markdown_table(
        ["side", "runs", "env steps/s (median)", "final return (mean)", "reached threshold", "s to threshold (median)",
         "masked actions taken"], summary)


def driver(args) -> None:
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        print(f"# {machine()}; MaskedChoices, {args.budget:,} steps, threshold {args.threshold}", flush=True)
        for seed in args.seeds:
            for side in rotated(list(args.sides), seed):
                r = measure(args, side, seed)
                with results.open("a") as out:
                    out.write(json.dumps(r) + "\n")
                print(f"# {side} seed {seed}: " + (r["error"] if "error" in r else
                      f"final {fmt(r['final_return'], '.2f')}, {r['train_s']:.1f} s, {r['fps']:,.0f} steps/s, "
                      f"{r['masked_taken']} masked"), flush=True)
    if results.exists():
        print(tables([json.loads(line) for line in results.read_text().splitlines() if line.strip()]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--budget", type=int, default=100_000, help="env steps of every run")
    parser.add_argument("--threshold", type=float, default=18.0,
                        help="mean return of the last 20 episodes (20: perfect)")
    parser.add_argument("--rlpar-overrides", nargs="*", default=[], help="more main.py overrides for the rlpar side")
    parser.add_argument("--results", default="/tmp/compare_maskable_ppo/results.jsonl", help="JSON lines, appended to")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--max-load", type=float, default=1.0)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--side", help=argparse.SUPPRESS)  # one run, in the process the driver starts
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        report(run_sb3_contrib(args.seed, args.budget, args.threshold) if args.side == "sb3-contrib"
               else run_rlpar(args.seed, args.budget, args.threshold, args.rlpar_overrides))
    else:
        driver(args)


if __name__ == "__main__":
    sys.exit(main())
