"""Compose rlpar's Hydra config from Python (tests, notebooks, benchmarks) without main.py."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_config(overrides: list[str] | None = None, *, run_dir: str | Path | None = None) -> DictConfig:
    """The same config `python main.py <overrides>` would build, with `run_dir` made concrete."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides or []))
    if run_dir is not None:
        with open_dict(cfg):
            cfg.run_dir = str(run_dir)
    return cfg
