"""What one SAC gradient step costs (a critic step and an actor step on one minibatch of 256),
over network widths, torch threads, and eager against compiled, each variant in a process of its
own (torch's thread count is set once per process), one after another.

    .venv/bin/python benchmarks/sac_step.py                                  # Pendulum's shapes
    .venv/bin/python benchmarks/sac_step.py --obs-dim 17 --action-dim 6     # HalfCheetah's
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import RLPAR_PYTHON, machine, markdown_table, report, result_of  # noqa: E402


def one_variant(args) -> dict:
    """Milliseconds per gradient step (median of `--rounds` blocks of 100), in this process."""
    import numpy as np
    import torch

    from rlpar.algos.sac import SAC, SACConfig
    from rlpar.envs.spaces import ActionInfo
    from rlpar.learning.peers import BatchShape
    from rlpar.models.actor_q_spec import ActorQSpec

    torch.set_num_threads(args.threads)
    action = ActionInfo(discrete=False, size=args.action_dim, low=(-1.0,) * args.action_dim, high=(1.0,) * args.action_dim)
    spec = ActorQSpec(obs_dim=args.obs_dim, action=action, hidden_sizes=(args.width, args.width))
    sac = SAC(SACConfig(compile=args.compiled), sampler=BatchShape(rollout_length=10**9), policy_spec=spec,
              total_steps=10**6, seed=0)
    rng = np.random.default_rng(0)
    n = 256
    minibatch = {"obs": rng.standard_normal((n, args.obs_dim), np.float32),
                 "actions": rng.uniform(-1, 1, (n, args.action_dim)).astype(np.float32),
                 "rewards": rng.standard_normal(n, np.float32), "next_obs": rng.standard_normal((n, args.obs_dim), np.float32),
                 "discounts": np.full(n, 0.99, np.float32)}
    inputs = {"minibatches": [minibatch], "weights": [np.ones(n, np.float32)], "lr": 3e-4}
    for _ in range(30):  # warm-up (and the compile)
        sac.learn(inputs)
    blocks = []
    for _ in range(args.rounds):
        began = time.perf_counter()
        for _ in range(100):
            sac.learn(inputs)
        blocks.append((time.perf_counter() - began) * 10)
    return {"ms_per_step": statistics.median(blocks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--obs-dim", type=int, default=3)
    parser.add_argument("--action-dim", type=int, default=1)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # width,threads,compiled: one measurement
    args = parser.parse_args()
    if args.variant:
        width, threads, compiled = args.variant.split(",")
        args.width, args.threads, args.compiled = int(width), int(threads), compiled == "1"
        report(one_variant(args))
        return
    print(f"# {machine()}; SAC step, obs {args.obs_dim}, actions {args.action_dim}, minibatch 256")
    rows = []
    for width in args.widths:
        for threads in (1, 2):
            for compiled in ("0", "1"):
                r = result_of([RLPAR_PYTHON, __file__, "--obs-dim", args.obs_dim, "--action-dim", args.action_dim,
                               "--rounds", args.rounds, "--variant", f"{width},{threads},{compiled}"])
                rows.append([f"{width}x{width}", threads, "compiled" if compiled == "1" else "eager",
                             f"{r['ms_per_step']:.2f}"])
                print(f"# {rows[-1]}", flush=True)
    print(markdown_table(["networks", "torch threads", "step", "ms per gradient step"], rows))


if __name__ == "__main__":
    main()
