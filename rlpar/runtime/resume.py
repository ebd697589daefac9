"""`resume=<run_dir>`: continue a run with the config it was started with."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from rlpar.config.changes import RESUME_OVERRIDABLE, follow_placement, repeated_group_problems, resume_change_problems
from rlpar.config.validate import ConfigError, resume_dir_problem
from rlpar.errors import first_line
from rlpar.runtime.run_dir import unsigned_code


def config_for_resume(cfg: DictConfig, overridden_keys: list[str] | None = None) -> DictConfig:
    """The saved config of `cfg.resume` with `run_dir` pointing at it; `cfg` itself otherwise.

    `overridden_keys` are the keys the user set on the command line (Hydra's, by default);
    those in RESUME_OVERRIDABLE take the new value, e.g. a larger `total_steps`.
    """
    if not cfg.get("resume"):
        return cfg
    problem = resume_dir_problem(cfg.resume)
    if problem:
        raise ConfigError([problem])
    keys = _overridden_keys() if overridden_keys is None else overridden_keys
    if fixed := resume_change_problems(keys):  # silently training with the saved value instead would surprise
        raise ConfigError(fixed)
    run_dir = Path(str(cfg.resume))
    saved = _load_saved_config(run_dir / "config.yaml")
    if problems := repeated_group_problems(keys, cfg, saved):
        raise ConfigError(problems)
    trusted = cfg.get("resume_trust", False)  # from the command line only: config.yaml cannot vouch for itself
    if trusted not in (True, False):
        raise ConfigError([f"resume_trust: {trusted!r} is not one of True, False"])
    if not trusted and (why := unsigned_code(run_dir, cast(dict, OmegaConf.to_container(saved, resolve=False)))):
        raise ConfigError(
            [
                f"resume: '{run_dir}': its config.yaml names code to import that this user's key did not "
                f"sign: {why}; nothing was imported. If you trust that directory: python main.py "
                f"resume={run_dir} resume_trust=true"
            ]
        )
    with open_dict(saved):
        saved.resume = str(run_dir)
        saved.run_dir = str(run_dir)
        for key in keys:
            if key in RESUME_OVERRIDABLE:
                OmegaConf.update(saved, key, OmegaConf.select(cfg, key), force_add=True)
        follow_placement(saved, keys)
    return saved


def _load_saved_config(path: Path) -> DictConfig:
    try:
        saved = OmegaConf.load(path)
    except Exception as err:  # YAML and OmegaConf errors take many forms
        raise ConfigError([f"resume: '{path}' cannot be read ({first_line(err)})"]) from err
    if not isinstance(saved, DictConfig):
        raise ConfigError([f"resume: '{path}' is not an rlpar config (expected a mapping)"])
    return saved


def _overridden_keys() -> list[str]:
    if not HydraConfig.initialized():
        return []
    task = cast(
        list[str], OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
    )  # `x=${y}` stays text
    return [o.split("=", 1)[0].lstrip("+~") for o in task]
