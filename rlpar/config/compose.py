"""Compose rlpar's Hydra config from Python (tests, notebooks, benchmarks) without main.py."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from rlpar.config.conf_dir import CONF_DIR


def compose_config(overrides: list[str] | None = None, *, run_dir: str | Path | None = None) -> DictConfig:
    """The same config `python main.py <overrides>` would build (its preset included), with
    `run_dir` made concrete."""
    from rlpar.config.presets import apply_preset, user_set_keys

    overrides = list(overrides or [])
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        choices = dict(cfg.hydra.runtime.choices)
        del cfg["hydra"]
    apply_preset(cfg, user_set_keys(overrides, choices))
    if run_dir is not None:
        with open_dict(cfg):
            cfg.run_dir = str(run_dir)
    return cfg
