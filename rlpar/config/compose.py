"""Compose rlpar's Hydra config from Python (tests, notebooks, benchmarks) without main.py."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict

from rlpar.config.conf_dir import CONF_DIR


def compose_config(overrides: list[str] | None = None, *, run_dir: str | Path | None = None) -> DictConfig:
    """The same config `python main.py <overrides>` would build (its preset included), with
    `run_dir` made concrete."""
    from hydra import compose, initialize_config_dir

    from rlpar.config.presets import with_preset

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        overrides = with_preset(
            list(overrides or []), lambda composing: compose(config_name="config", overrides=composing)
        )
        cfg = compose(config_name="config", overrides=overrides)
    if run_dir is not None:
        with open_dict(cfg):
            cfg.run_dir = str(run_dir)
    return cfg
