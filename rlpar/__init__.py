"""rlpar: parallel and distributed reinforcement learning on Ray, PyTorch and Gymnasium."""

import os as _os

__version__ = "0.1.0"

# One BLAS thread (unless the user chose otherwise): rlpar's numpy work is many small matmuls
# (acting copies of the policy), which OpenBLAS splits over threads from 256-wide layers on; on
# a busy 2-core machine that made an 8 x 256 @ 256 x 256 product take 3.3 ms instead of 0.13 ms
# (docs/benchmarks.md). Takes effect when rlpar is imported before numpy (main.py does).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def run(cfg):
    """Train from a composed config (see `rlpar.runtime.run`); imported lazily to keep `import rlpar` cheap."""
    from rlpar.runtime.run import run as _run

    return _run(cfg)
