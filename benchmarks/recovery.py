"""What a dead worker costs: seconds and iterations until its replacement trains again.

    .venv/bin/python benchmarks/recovery.py parallel=multiprocess
    .venv/bin/python benchmarks/recovery.py parallel=distributed

Trains `workers=4` (CartPole, 2 environments each), SIGKILLs worker 1's process, and reports
the time from the kill to the first iteration with 4 live workers again, the iterations that
ran short-handed meanwhile, and env steps/s over the 3 s before and after the kill.
"""

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1 only

from rlpar.config.compose import compose_config  # noqa: E402
from rlpar.runtime.build import build_trainer  # noqa: E402


def steps_per_second(trainer, seconds: float) -> float:
    start, steps = time.perf_counter(), trainer.env_steps
    while time.perf_counter() - start < seconds:
        trainer.train()
    return (trainer.env_steps - steps) / (time.perf_counter() - start)


def main(overrides: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose_config(["progress=false", "workers=4", "envs_per_worker=2", *overrides], run_dir=tmp)
        trainer = build_trainer(cfg)
        try:
            for _ in range(3):
                trainer.train()
            before = steps_per_second(trainer, 3.0)
            os.kill(trainer.sampler.worker_pids()[1], signal.SIGKILL)
            killed = time.perf_counter()
            short_handed = 0
            while True:
                metrics = trainer.train()
                if metrics["live_workers"] == 4 and metrics["batches_this_iter"] == 4:
                    break
                short_handed += 1
            recovered = time.perf_counter() - killed
            after = steps_per_second(trainer, 3.0)
        finally:
            trainer.close()
    print(f"{' '.join(overrides)}: back to 4 workers {recovered:.2f} s after the kill, "
          f"{short_handed} iterations short-handed; {before:,.0f} env steps/s before, {after:,.0f} after "
          f"(worker_restarts={metrics['worker_restarts']})")


if __name__ == "__main__":
    main(sys.argv[1:])
