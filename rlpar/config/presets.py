"""Tuned hyper-parameters per (algorithm, environment id): conf/preset/<algo.name>/<env.id>.yaml,
or, for the ids of a namespace that have none of their own, conf/preset/<algo.name>/<namespace>.yaml
(ALE/Pong-v5 and ALE/Breakout-v5 share conf/preset/ppo/ALE.yaml).

Chosen by the environment actually trained, so `env.id=Acrobot-v1` never runs CartPole's preset,
and applied under everything the user chose: a key set on the command line, or by an
experiment or other `@package _global_` option (a table row, hardware), keeps that value. An
environment with no preset runs the algorithm's baseline, and the run says so in one line.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from rlpar.config.conf_dir import CONF_DIR

PRESET_DIR = CONF_DIR / "preset"


def preset_path(algo_name, env_id) -> Path | None:
    """`<algo>/<env id>.yaml`; for a namespaced id without one (`ALE/Pong-v5`), the namespace's
    shared preset `<algo>/<namespace>.yaml` (`ALE.yaml`: every Atari game)."""
    if not env_id:
        return None
    env_id = str(env_id)
    candidates = [PRESET_DIR / str(algo_name) / f"{env_id}.yaml"]
    if "/" in env_id:
        candidates.append(PRESET_DIR / str(algo_name) / f"{env_id.split('/', 1)[0]}.yaml")
    return next((path for path in candidates if _is_file(path)), None)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system: no preset has it (validation names the id)
        return False


def flat_keys(tree: dict, prefix: str = "") -> dict[str, object]:
    """{"a.b": value} for every leaf of a nested mapping."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_keys(value, name + "."))
        else:
            flat[name] = value
    return flat


def user_set_keys(overrides: list[str], choices: dict) -> set[str]:
    """Keys the command line sets, and those set by the chosen `@package _global_` options."""
    keys = set()
    for text in overrides:
        key = text.split("=", 1)[0].lstrip("+~")
        if "=" in text and not key.startswith("hydra") and not (CONF_DIR / key).is_dir():
            keys.add(key)
    for group, option in choices.items():
        path = CONF_DIR / str(group) / f"{option}.yaml"
        if option is not None and path.is_file() and path.read_text().startswith("# @package _global_"):
            content = yaml.safe_load(path.read_text()) or {}
            keys |= set(flat_keys({k: v for k, v in content.items() if k not in ("defaults", "hydra")}))
    return keys


def _overlaps(key: str, chosen: set[str]) -> bool:
    return any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in chosen)


def apply_preset(cfg: DictConfig, user_keys: set[str]) -> str:
    """Set the preset's values that the user did not choose; return a line saying what ran."""
    algo_name, env_id = OmegaConf.select(cfg, "algo.name"), OmegaConf.select(cfg, "env.id")
    env_name = env_id or OmegaConf.select(cfg, "env.entry_point")
    path = preset_path(algo_name, env_id)
    if path is None:
        return (f"rlpar: no tuned {algo_name} preset for {env_name}: training with {algo_name}'s baseline "
                f"hyper-parameters (conf/algo/{algo_name}.yaml)")
    preset = flat_keys(yaml.safe_load(path.read_text()) or {})
    applied = [key for key in preset if not _overlaps(key, user_keys)]
    with open_dict(cfg):
        for key in applied:
            OmegaConf.update(cfg, key, preset[key], force_add=True)
    return f"rlpar: {algo_name} preset for {env_id} ({path.relative_to(CONF_DIR.parent)})"
