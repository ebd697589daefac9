"""One Sample Factory 2 training run, in SF2's own venv (see compare_sample_factory.py), measured
with the clocks that rlpar's side uses: seconds from the launch of this process (`BENCH_T0`, set by
the driver just before it starts us), env steps (frames on Pong), and the episode-return mean that
SF2 reports. Prints one `RESULT {json}` line.

    <sf2 venv>/bin/python benchmarks/sample_factory/sf2_run.py --task cartpole --seed 0 -- --serial_mode=True ...

Everything after `--` goes to SF2's own argument parser unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

T0 = float(os.environ.get("BENCH_T0", time.time()))

import gymnasium as gym  # noqa: E402
from sample_factory.algo.runners.runner import AlgoObserver  # noqa: E402
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args  # noqa: E402
from sample_factory.envs.env_utils import register_env  # noqa: E402
from sample_factory.train import make_runner  # noqa: E402

PONG = "ale_pong_v5"


def make_cartpole(full_env_name, cfg=None, env_config=None, render_mode=None):
    return gym.make("CartPole-v1", render_mode=render_mode)


def make_pong(full_env_name, cfg=None, env_config=None, render_mode=None):
    """SF2's own Atari wrapper chain (sf_examples/atari/atari_utils.py) over the emulator that rlpar
    steps: ALE/Pong-v5 with sticky actions 0.25 and the frame skip done by the wrapper, as rlpar's
    env=atari does (SF2's examples use PongNoFrameskip-v4, without sticky actions)."""
    from sample_factory.envs.env_wrappers import (ClipRewardEnv, EpisodicLifeEnv, FireResetEnv, MaxAndSkipEnv,
                                                  NoopResetEnv, NumpyObsWrapper)

    import ale_py  # noqa: F401  (registers the ALE/ ids, also in SF2's spawned workers)

    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.25, full_action_space=False,
                   render_mode=render_mode)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = NoopResetEnv(env, noop_max=30)
    env = MaxAndSkipEnv(env, skip=cfg.env_frameskip)
    env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    env = ClipRewardEnv(env)
    env = gym.wrappers.ResizeObservation(env, (84, 84))
    env = gym.wrappers.GrayScaleObservation(env)
    env = gym.wrappers.FrameStack(env, cfg.env_framestack)
    return NumpyObsWrapper(env)


class Watch(AlgoObserver):
    """After each training iteration: the clocks, env steps and the reported return mean; stops the
    run at the threshold or when the training budget is spent."""

    def __init__(self, threshold: float | None, budget_s: float):
        self.threshold, self.budget_s = threshold, budget_s
        self.curve: list[tuple[float, int, float | None]] = []  # (s from launch, env steps, return mean)
        self.reached = None

    def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
        now = time.time() - T0
        steps = sum(runner.env_steps.values())
        rewards = runner.policy_avg_stats.get("reward", [[]])[0]
        mean = sum(rewards) / len(rewards) if len(rewards) else None
        self.curve.append((round(now, 3), int(steps), mean))
        if self.reached is None and self.threshold is not None and mean is not None and mean >= self.threshold:
            self.reached = self.curve[-1]
        if self.reached is not None or now - self.curve[0][0] >= self.budget_s:
            runner._stop_training()  # SF2's own way to end a run (saves, stops its components)


def main() -> None:
    split = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    own, sf_argv = sys.argv[1:split], sys.argv[split + 1:]
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=["cartpole", "pong"], required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threshold", type=float, default=None)
    p.add_argument("--budget-s", type=float, default=120.0, help="seconds of training at most, from the first iteration")
    p.add_argument("--torch-threads", type=int, default=None, help="serial mode: torch threads of the one process")
    args = p.parse_args(own)
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)  # serial mode keeps it; parallel components set 1 themselves
    with tempfile.TemporaryDirectory(prefix="sf2_") as train_dir:
        argv = [f"--env={'CartPole-v1' if args.task == 'cartpole' else PONG}", f"--seed={args.seed}",
                f"--train_dir={train_dir}", "--experiment=bench", "--device=cpu", "--restart_behavior=overwrite",
                "--save_every_sec=100000", "--save_best_every_sec=100000", "--with_wandb=False",
                *sf_argv]
        if args.task == "cartpole":
            register_env("CartPole-v1", make_cartpole)
            parser, _ = parse_sf_args(argv=argv)
        else:
            from sf_examples.atari.atari_params import atari_override_defaults

            register_env(PONG, make_pong)
            parser, partial = parse_sf_args(argv=argv)
            atari_override_defaults(partial.env, parser)
        cfg = parse_full_cfg(parser, argv)
        cfg, runner = make_runner(cfg)
        watch = Watch(args.threshold, args.budget_s)
        runner.register_observer(watch)
        status = runner.init()
        if status == 0:
            status = runner.run()
    end = time.time() - T0
    settings = {k: getattr(cfg, k) for k in ("serial_mode", "async_rl", "num_workers", "num_envs_per_worker", "worker_num_splits",
                                    "batch_size", "rollout", "num_batches_per_epoch", "num_epochs",
                                    "policy_workers_per_policy", "batched_sampling", "stats_avg")}
    settings["torch_threads"] = args.torch_threads
    print("RESULT " + json.dumps({"status": int(status), "curve": watch.curve, "reached": watch.reached,
                                  "process_s": round(end, 3), "settings": settings}), flush=True)


if __name__ == "__main__":
    main()
