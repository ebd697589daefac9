"""What a recurrent policy costs against a feed-forward one (`model.recurrent`), next to the extra
arithmetic it does: acting (the workers' numpy float64 copy, and the torch copy for a CNN) in
environment steps per second, and PPO's update (forward, loss, backward, Adam over a real CartPole
batch of 8 environments x 128 steps, the baseline's 10 epochs of minibatch 64) in samples per
second. One process, the variants alternating round by round; medians of `--rounds` rounds.

    .venv/bin/python benchmarks/recurrent.py
    .venv/bin/python benchmarks/recurrent.py --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from common import machine, markdown_table, rotated
from rlpar.algos.ppo import PPO, PPOConfig
from rlpar.envs.factory import resolve_env_spec
from rlpar.envs.spaces import ActionInfo
from rlpar.learning.peers import BatchShape
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import probe_policy_spec
from rlpar.sampling.rollout import RolloutWorker

RECURRENT = (None, "lstm", "gru")


def multiply_adds(spec: PolicySpec) -> int:
    """Multiply-adds per row of the MLP network: two towers, or trunk, core and heads."""
    sizes = [spec.obs_dim, *spec.hidden_sizes]
    trunk = sum(a * b for a, b in zip(sizes, sizes[1:]))
    if spec.recurrent is None:
        return 2 * (trunk + sizes[-1] * spec.action.size)
    gates = {"lstm": 4, "gru": 3}[spec.recurrent] * spec.recurrent_size
    return trunk + gates * (sizes[-1] + spec.recurrent_size) + spec.recurrent_size * (spec.action.size + 1)


def acting_rate(policy, spec, rows: int, steps: int, rng) -> float:
    """Environment steps per second of `act_raw` for `rows` environments."""
    if spec.obs_dtype == "uint8":
        obs = rng.integers(0, 256, (rows, spec.obs_dim), dtype=np.uint8)
    else:
        obs = rng.normal(size=(rows, spec.obs_dim)).astype(np.float32)
    noise = rng.random((steps, rows))
    state = np.zeros((rows, spec.state_size)) if spec.state_size else None
    start = time.perf_counter()
    for t in range(steps):
        policy.act_raw(obs, noise[t], state)
    return steps * rows / (time.perf_counter() - start)


def acting(name: str, specs: dict, *, rows: int, steps: int, rounds: int) -> list:
    rng = np.random.default_rng(0)
    policies = {}
    for label, spec in specs.items():
        policies[label] = spec.acting_policy()
        policies[label].set_weights({k: v.numpy() for k, v in spec.build().state_dict().items()})
        acting_rate(policies[label], spec, rows, max(steps // 10, 1), rng)  # warm-up
    figures = {label: [] for label in specs}
    for r in range(rounds):
        for label in rotated(list(specs), r):
            figures[label].append(acting_rate(policies[label], specs[label], rows, steps, rng))
    medians = {label: statistics.median(v) for label, v in figures.items()}
    base = next(iter(medians.values()))
    print(f"acting, {name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in medians.items()) + " steps/s", flush=True)
    return [f"acting, {name}", *(f"{v:,.0f} ({base / v:.2f}x)" for v in medians.values())]


def cartpole_batch(spec):
    worker = RolloutWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=spec, num_envs=8,
                           rollout_length=128, seed=0)
    try:
        ppo = PPO(PPOConfig(lr=1e-7, compile=False), sampler=BatchShape(rollout_length=10**9), policy_spec=spec,
                  total_steps=10**9, seed=0)
        worker.set_weights(ppo.get_weights(), version=0)
        return ppo, ppo.learning_inputs(worker.sample())
    finally:
        worker.close()


def learning(specs: dict, *, rounds: int) -> list:
    """PPO's whole update (10 epochs of minibatch 64) on one CartPole batch, in samples per second."""
    learners = {label: cartpole_batch(spec) for label, spec in specs.items()}

    def rate(label):
        ppo, inputs = learners[label]
        start = time.perf_counter()
        ppo.learn(inputs)
        return ppo.epochs * inputs["valid"].sum() / (time.perf_counter() - start)

    for label in specs:
        rate(label)  # warm-up
    figures = {label: [] for label in specs}
    for r in range(rounds):
        for label in rotated(list(specs), r):
            figures[label].append(rate(label))
    medians = {label: statistics.median(v) for label, v in figures.items()}
    base = next(iter(medians.values()))
    print("PPO update: " + ", ".join(f"{k} {v:,.0f}" for k, v in medians.items()) + " samples/s", flush=True)
    return ["PPO update (eager), MLP 64x64, 8 x 128 steps", *(f"{v:,.0f} ({base / v:.2f}x)" for v in medians.values())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# {machine()}; torch threads 1", flush=True)
    base, _ = probe_policy_spec(resolve_env_spec(id="CartPole-v1"), PolicySpec, normalize_obs=False)
    mlp = {str(kind or "feed-forward"): PolicySpec(**{**base.__dict__, "recurrent": kind}) for kind in RECURRENT}
    arithmetic = ["multiply-adds per row, MLP 64x64 (CartPole), core 128",
                  *(f"{multiply_adds(s):,} ({multiply_adds(s) / multiply_adds(mlp['feed-forward']):.2f}x)" for s in mlp.values())]
    rows = [arithmetic,
            acting("MLP, 8 environments", mlp, rows=8, steps=3000, rounds=args.rounds),
            acting("MLP, 64 environments", mlp, rows=64, steps=1000, rounds=args.rounds),
            learning(mlp, rounds=args.rounds)]
    image = dict(obs_dim=4 * 84 * 84, obs_dtype="uint8", image_shape=(4, 84, 84), encoder="nature",
                 action=ActionInfo(discrete=True, size=6))
    for acting_copy in ("numpy", "torch"):
        cnn = {str(kind or "feed-forward"): PolicySpec(**image, acting=acting_copy, recurrent=kind) for kind in RECURRENT}
        rows.append(acting(f"Nature CNN (4x84x84), {acting_copy} copy, 8 environments", cnn, rows=8, steps=20,
                           rounds=args.rounds))
    print()
    print(markdown_table(["measure (times slower than feed-forward)", "feed-forward", "LSTM", "GRU"], rows))


if __name__ == "__main__":
    main()
