"""rlpar: parallel and distributed reinforcement learning on Ray, PyTorch and Gymnasium."""

__version__ = "0.1.0"


def run(cfg):
    """Train from a composed config (see `rlpar.runtime.run`); imported lazily to keep `import rlpar` cheap."""
    from rlpar.runtime.run import run as _run

    return _run(cfg)
