"""What a learner's step leaves the sampler: raw vector-env steps right after it, against warm ones.

Inside a training run the sampler steps its environments right after the learner's step. With
the CartPole preset at 64 environments, a rollout is 8 steps. This script steps Gymnasium's raw
vector env (`gym.make_vec(ID, N, vectorization_mode="vector_entry_point")`, random actions) in
bursts of a rollout's length. Before each burst, one of these runs: nothing (warm); an idle
sleep as long as a learner's step; a sweep of a large array (the caches evicted); Adam steps of
PPO's CartPole MLP with one torch thread (rlpar's `hardware.torch_threads` default) and with two.
The gap between the warm and learner rows is what the sampler inside training pays,
whatever its own code does (benchmarks/sampler_in_training.py).

    .venv/bin/python benchmarks/cold_after_learner.py
    .venv/bin/python benchmarks/cold_after_learner.py --envs 64 --burst 8 --gradient-steps 16 --rounds 300
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as rlpar sets it

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import machine, markdown_table  # noqa: E402

SWEEP_BYTES = 64 << 20  # larger than this machine's caches


def burst_us_per_step(venv: gym.vector.VectorEnv, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(venv.action_space.sample())
    return (time.perf_counter() - start) / steps * 1e6


def learner_step(gradient_steps: int, obs_dim: int, actions: int):
    """Adam steps of a 64x64 tanh MLP on a minibatch of 64, as PPO's CartPole learner takes."""
    net = torch.nn.Sequential(
        torch.nn.Linear(obs_dim, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, actions + 1),
    )
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-4)
    minibatch = torch.randn(64, obs_dim)

    def step() -> None:
        for _ in range(gradient_steps):
            loss = net(minibatch).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--burst", type=int, default=8, help="env steps per burst (a rollout's length)")
    parser.add_argument("--gradient-steps", type=int, default=16, help="the learner's steps between bursts")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()

    venv = gym.make_vec(args.env, args.envs, vectorization_mode="vector_entry_point")
    venv.reset(seed=0)
    obs_dim = int(np.prod(venv.single_observation_space.shape))
    actions = int(getattr(venv.single_action_space, "n", 1))
    learner = learner_step(args.gradient_steps, obs_dim, actions)
    for _ in range(5):  # torch's first steps set things up
        learner()
    start = time.perf_counter()
    learner()
    learner_s = time.perf_counter() - start
    sweep = np.zeros(SWEEP_BYTES // 8)

    def with_threads(count: int):
        def run() -> None:
            torch.set_num_threads(count)
            learner()

        return run

    before_burst = {
        "nothing (warm)": lambda: None,
        f"idle sleep of the learner's time ({learner_s * 1e3:.0f} ms)": lambda: time.sleep(learner_s),
        f"a sum over {SWEEP_BYTES >> 20} MB (caches swept)": lambda: sweep.sum(),
        f"{args.gradient_steps} Adam steps, 1 torch thread": with_threads(1),
        f"{args.gradient_steps} Adam steps, 2 torch threads": with_threads(2),
    }
    rows = []
    warm = None
    for name, run in before_burst.items():
        times = []
        for _ in range(args.rounds):
            run()
            times.append(burst_us_per_step(venv, args.burst))
        median = statistics.median(times[args.rounds // 10 :])
        warm = warm or median
        rows.append([name, f"{median:.1f}", f"{median / warm:.2f}x"])
    venv.close()
    print(machine())
    print(f"{args.env}, {args.envs} environments, bursts of {args.burst} steps, {args.rounds} rounds each")
    print(markdown_table(["before each burst", "us per env step (median)", "vs warm"], rows))


if __name__ == "__main__":
    main()
