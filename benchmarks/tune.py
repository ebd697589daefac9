"""Quick tuning helper: steps and seconds to a return threshold over seeds (not part of CI)."""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlpar.config.compose import compose_config  # noqa: E402
from rlpar.runtime.build import build_trainer  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--seeds", nargs="+", default=["0,1,2"], help="seeds, space- or comma-separated")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    is_seeds = lambda item: all(part.isdigit() for part in item.split(",") if part)
    seeds = [int(p) for item in args.seeds if is_seeds(item) for p in item.split(",") if p]
    args.overrides = [item for item in args.seeds if not is_seeds(item)] + args.overrides
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = compose_config([*args.overrides, f"seed={seed}", "progress=false"], run_dir=tmp)
            trainer = build_trainer(cfg)
            reached = None
            while not trainer.done:
                m = trainer.train()
                if m["episode_return_mean"] is not None and m["episode_return_mean"] >= args.threshold:
                    reached = m
                    break
            trainer.close()
            if reached:
                print(f"seed {seed}: reached at {m['env_steps']} steps, {m['wall_time_s']:.2f} s", flush=True)
            else:
                print(f"seed {seed}: NOT reached, best {m['episode_return_best_mean']}, {m['wall_time_s']:.2f} s", flush=True)


if __name__ == "__main__":
    main()
