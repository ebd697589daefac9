"""rlpar: parallel and distributed reinforcement learning on Ray, PyTorch and Gymnasium."""

import os as _os

__version__ = "0.1.0"

# One BLAS thread (unless the user chose otherwise): rlpar's numpy work is many small matmuls
# (acting copies of the policy), which OpenBLAS splits over threads from 256-wide layers on; on
# a busy 2-core machine that made an 8 x 256 @ 256 x 256 product take 3.3 ms instead of 0.13 ms
# (docs/benchmarks.md). Takes effect when rlpar is imported before numpy (main.py does).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def __getattr__(name: str):
    """`from rlpar import compose_config, build_trainer, load_policy`, imported on first use
    (PEP 562) so that `import rlpar` stays cheap: neither torch nor Hydra is loaded by it."""
    if name == "compose_config":
        from rlpar.config.compose import compose_config

        return compose_config
    if name == "build_trainer":
        from rlpar.runtime.build import build_trainer

        return build_trainer
    if name == "load_policy":  # a run's policy outside training (rlpar.serving.policy)
        from rlpar.serving.policy import load_policy

        return load_policy
    raise AttributeError(f"module 'rlpar' has no attribute '{name}'")


def train(overrides: list[str] | None = None, *, run_dir) -> dict:
    """`python main.py <overrides> run_dir=<run_dir>` from Python: compose (presets included),
    validate, lock the run directory, train, evaluate; returns the final metrics."""
    from rlpar.config.compose import compose_config

    return run(compose_config(overrides, run_dir=run_dir))


def run(cfg):
    """Train from a composed config (see `rlpar.runtime.run`); imported lazily to keep `import rlpar` cheap."""
    from rlpar.runtime.run import run as _run

    return _run(cfg)


def evaluate(run_dir, *, episodes: int = 10, video_episodes: int = 1, seed=None, trust: bool = False) -> dict:
    """`rlpar evaluate RUN_DIR` from Python: the newest checkpoint's deterministic policy, with
    videos of its first `video_episodes` episodes (see `rlpar.runtime.evaluate_run`; `trust`:
    `--trust`)."""
    from rlpar.runtime.evaluate_run import evaluate_run

    return evaluate_run(run_dir, episodes=episodes, video_episodes=video_episodes, seed=seed, trust=trust)
