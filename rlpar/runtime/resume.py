"""`resume=<run_dir>`: continue a run with the config it was started with."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from rlpar.config.validate import ConfigError

# Keys a user may change when resuming (e.g. to train longer); everything else comes from the run.
RESUME_OVERRIDABLE = ("total_steps", "progress", "checkpoint.every", "checkpoint.keep", "eval_episodes")


def config_for_resume(cfg: DictConfig, overridden_keys: list[str] | None = None) -> DictConfig:
    """The saved config of `cfg.resume` with `run_dir` pointing at it; `cfg` itself otherwise.

    `overridden_keys` are the keys the user set on the command line (Hydra's, by default);
    those in RESUME_OVERRIDABLE take the new value, e.g. a larger `total_steps`.
    """
    if not cfg.get("resume"):
        return cfg
    run_dir = Path(str(cfg.resume))
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise ConfigError([f"resume: '{cfg.resume}' is not an rlpar run directory (no config.yaml)"])
    saved = OmegaConf.load(saved_path)
    with open_dict(saved):
        saved.resume = str(run_dir)
        saved.run_dir = str(run_dir)
        for key in _overridden_keys() if overridden_keys is None else overridden_keys:
            if key in RESUME_OVERRIDABLE:
                OmegaConf.update(saved, key, OmegaConf.select(cfg, key), force_add=True)
    return saved


def _overridden_keys() -> list[str]:
    if not HydraConfig.initialized():
        return []
    return [o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task]
