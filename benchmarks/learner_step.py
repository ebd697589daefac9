"""The learner's gradient step, eager against compiled, in one process and alternating, so that
the machine's drift falls on all of them alike: PPO's update on one fixed batch, microseconds per
minibatch step (the median of `--rounds` updates each), and what compiling cost.

    .venv/bin/python benchmarks/learner_step.py                       # the seed table's Pendulum shapes
    .venv/bin/python benchmarks/learner_step.py --unroll 1 2 4 env=cartpole algo.minibatch_size=256
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlpar.config.compose import compose_config  # noqa: E402
from rlpar.learning.optimization.compiled import gradient_step  # noqa: E402
from rlpar.runtime.build import build_trainer  # noqa: E402

TABLE = ["env=pendulum", "workers=1", "envs_per_worker=1", "algo.rollout_length=2048", "algo.epochs=10",
         "algo.minibatch_size=64", "algo.lr=1e-6"]  # a tiny lr: the same batch is learnt from again and again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unroll", type=int, nargs="*", default=[1, 4], help="compiled variants: minibatch steps per graph")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("overrides", nargs="*", help="config overrides (default: the seed table's local row)")
    args = parser.parse_args()
    with TemporaryDirectory() as tmp:
        cfg = compose_config(["progress=false", "checkpoint.every=0", "algo.compile=false", *(args.overrides or TABLE)],
                             run_dir=tmp)
        trainer = build_trainer(cfg)
        try:
            algorithm = trainer.algorithm
            batch = algorithm.sampler.sample(algorithm.get_weights(), 0)
            steps = {}
            variants = {"eager": algorithm.gradient_step}
            for unroll in args.unroll:
                variants[f"compiled, unroll {unroll}"] = gradient_step(
                    algorithm.minibatch_loss, model=algorithm.model, guard=algorithm.step, compiled=True, unroll=unroll)
                variants[f"compiled, unroll {unroll}"].wait_compiled()  # compiled at its first update, here
            timings = {name: [] for name in variants}
            for name, step in variants.items():  # the first update of each compiles
                algorithm.gradient_step = step
                start = time.perf_counter()
                steps[name] = algorithm.update(batch)["gradient_steps"]
                print(f"{name}: first update {time.perf_counter() - start:.2f} s", flush=True)
            for _ in range(args.rounds):
                for name, step in variants.items():
                    algorithm.gradient_step = step
                    start = time.perf_counter()
                    algorithm.update(batch)
                    timings[name].append((time.perf_counter() - start) / steps[name] * 1e6)
            for name, values in timings.items():
                print(f"{name}: {statistics.median(values):.0f} us per minibatch step (median of {len(values)} updates "
                      f"of {steps[name]} steps; min {min(values):.0f})")
        finally:
            trainer.close()


if __name__ == "__main__":
    main()
