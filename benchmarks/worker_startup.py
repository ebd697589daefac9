"""What importing torch in a worker costs: seconds from building a run to its first batch, with
numpy-only rollout workers (PPO) against A3C's gradient workers (a torch model each).

    .venv/bin/python benchmarks/worker_startup.py            # parallel=multiprocess, workers 2 and 4
    .venv/bin/python benchmarks/worker_startup.py --repeats 5

One line per measurement, `name: value unit`: the median over the repeats of building the
trainer (the workers start) plus its first iteration (they answer), each in a fresh process so
that no import is cached.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys, tempfile, time
began = time.perf_counter()
from rlpar.config.compose import compose_config
from rlpar.runtime.build import build_trainer
with tempfile.TemporaryDirectory() as run_dir:
    trainer = build_trainer(compose_config(sys.argv[1:], run_dir=run_dir), progress=False)
    try:
        trainer.train()
    finally:
        trainer.close()
print(time.perf_counter() - began)
"""


def seconds(*overrides: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, *overrides, "checkpoint.every=0"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="*", default=[2, 4])
    args = parser.parse_args()
    for workers in args.workers:
        for algo in ("ppo", "a3c"):
            runs = [seconds(f"algo={algo}", "parallel=multiprocess", f"workers={workers}") for _ in range(args.repeats)]
            print(f"start and first iteration algo={algo} parallel=multiprocess workers={workers}: "
                  f"{statistics.median(runs):.2f} s", flush=True)


if __name__ == "__main__":
    main()
