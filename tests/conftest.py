import os
import sys
from pathlib import Path

# Before anything imports Ray: every Ray node and driver of the tests stays on 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

from rlpar.config.compose import compose_config  # noqa: E402


@pytest.fixture
def make_cfg(tmp_path):
    """Compose the real config with overrides, writing into a fresh run directory."""

    def _make(*overrides, run_dir=None):
        return compose_config(["progress=false", *overrides], run_dir=run_dir or tmp_path / "run")

    return _make
