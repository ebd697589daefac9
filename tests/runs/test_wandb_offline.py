"""logger=wandb works with no network: an offline run directory with our scalars appears."""

import os

import pytest

from rlpar.runtime.run import run
from tests.defaults import STEPS_PER_ITERATION


@pytest.mark.slow
def test_wandb_offline_run_is_written(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "w"
    final = run(make_cfg("logger=wandb", f"total_steps={4 * STEPS_PER_ITERATION}", run_dir=run_dir))
    assert final["iteration"] == 4
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    files = [p for p in offline[0].rglob("*.wandb")]
    assert files and os.path.getsize(files[0]) > 0
    assert (run_dir / "tensorboard").is_dir()  # TensorBoard stays on alongside W&B
