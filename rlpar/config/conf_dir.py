"""Where rlpar's Hydra config groups live (the repository's conf/)."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
