"""The learner's gradient step in fp32, bf16 and fp16 (`algo.precision`), in one process and
alternating, so that the machine's drift falls on all of them alike: PPO's minibatch step
(forward, loss, backward, clip, Adam) on the MLP (a real CartPole batch, minibatch 64) and on the
Nature CNN (a synthetic Atari batch of 4 x 84 x 84 uint8 frames, minibatch 256, as PPO's Atari
preset), in samples per second (the median of `--rounds` rounds).

    .venv/bin/python benchmarks/precision.py                # one torch thread, as runs use (hardware.torch_threads)
    .venv/bin/python benchmarks/precision.py --threads 2 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from common import machine, markdown_table, rotated
from rlpar.algos.ppo import LEARNING_ARRAYS, PPO, PPOConfig
from rlpar.envs.factory import resolve_env_spec
from rlpar.envs.spaces import ActionInfo
from rlpar.learning.peers import BatchShape
from rlpar.learning.estimators.batch_tensors import valid_step_tensors
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import probe_policy_spec
from rlpar.sampling.rollout import RolloutWorker

PRECISIONS = ("fp32", "bf16", "fp16")


def make_ppo(policy_spec, precision: str, minibatch_size: int) -> PPO:
    """Eager steps (a precision other than fp32 never compiles); a tiny lr: the same data is
    learnt from again and again."""
    return PPO(PPOConfig(lr=1e-7, minibatch_size=minibatch_size, compile=False, precision=precision),
               sampler=BatchShape(rollout_length=10**9), policy_spec=policy_spec, total_steps=10**9, seed=0)


def cartpole_data(policy_spec) -> dict:
    """A real CartPole batch (8 environments x 128 steps) as PPO's gradient steps take it."""
    worker = RolloutWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=policy_spec, num_envs=8,
                           rollout_length=128, seed=0)
    try:
        ppo = make_ppo(policy_spec, "fp32", 64)
        worker.set_weights(ppo.get_weights(), version=0)
        inputs = ppo.learning_inputs(worker.sample())
    finally:
        worker.close()
    return valid_step_tensors({name: inputs[name] for name in LEARNING_ARRAYS}, inputs["valid"], ppo.device)


def atari_data(policy_spec, rows: int) -> dict:
    """Random frames and targets shaped as an Atari batch: the step's cost does not depend on the values."""
    rng = np.random.default_rng(0)
    actions = policy_spec.action.size
    return {"obs": torch.from_numpy(rng.integers(0, 256, (rows, policy_spec.obs_dim), dtype=np.uint8)),
            "actions": torch.from_numpy(rng.integers(0, actions, rows)),
            "old_logp": torch.full((rows,), -float(np.log(actions))),
            "old_values": torch.zeros(rows), "advantages": torch.randn(rows), "returns": torch.randn(rows)}


def samples_per_s(ppo: PPO, data: dict, *, steps: int, rng: np.random.Generator) -> float:
    """Gradient steps on random minibatches of `data`, timed together."""
    size, mb = len(data["obs"]), ppo.minibatch_size
    minibatches = []
    for _ in range(steps):
        rows = torch.from_numpy(rng.choice(size, mb, replace=False))
        minibatches.append({**{k: v[rows] for k, v in data.items()}, "behaviour_weights": torch.ones(mb)})
    start = time.perf_counter()
    for minibatch in minibatches:
        ppo.gradient_step(**minibatch)
    return steps * mb / (time.perf_counter() - start)


def measure(name: str, policy_spec, data: dict, *, minibatch_size: int, steps: int, rounds: int) -> list:
    learners = {p: make_ppo(policy_spec, p, minibatch_size) for p in PRECISIONS}
    rng = np.random.default_rng(1)
    for ppo in learners.values():  # warm-up (fp16: the scaler settles on a scale that fits)
        samples_per_s(ppo, data, steps=max(steps // 4, 2), rng=rng)
    figures = {p: [] for p in PRECISIONS}
    for r in range(rounds):
        for precision in rotated(list(PRECISIONS), r):
            figures[precision].append(samples_per_s(learners[precision], data, steps=steps, rng=rng))
    medians = {p: statistics.median(v) for p, v in figures.items()}
    skipped = learners["fp16"].step.nonfinite_updates
    print(f"{name}: " + ", ".join(f"{p} {medians[p]:,.0f}" for p in PRECISIONS) + f" samples/s "
          f"(fp16: {skipped} steps skipped by the scaler, scale {learners['fp16'].step.scaler.get_scale():g})", flush=True)
    return [name, *(f"{medians[p]:,.0f}" for p in PRECISIONS),
            *(f"{medians[p] / medians['fp32']:.2f}x" for p in PRECISIONS[1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (runs: hardware.torch_threads, 1)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {machine()}; torch threads {args.threads}", flush=True)
    mlp_spec, _ = probe_policy_spec(resolve_env_spec(id="CartPole-v1"), PolicySpec, normalize_obs=False)
    cnn_spec = PolicySpec(obs_dim=4 * 84 * 84, obs_dtype="uint8", image_shape=(4, 84, 84), channels_last=False,
                          encoder="nature", action=ActionInfo(discrete=True, size=6))
    rows = [measure("PPO, MLP 64x64 (CartPole), minibatch 64", mlp_spec, cartpole_data(mlp_spec), minibatch_size=64,
                    steps=300, rounds=args.rounds),
            measure("PPO, Nature CNN (4x84x84 uint8), minibatch 256", cnn_spec, atari_data(cnn_spec, 1024),
                    minibatch_size=256, steps=3, rounds=args.rounds)]
    print()
    print(markdown_table(["learner step", "fp32 samples/s", "bf16", "fp16", "bf16 / fp32", "fp16 / fp32"], rows))


if __name__ == "__main__":
    main()
