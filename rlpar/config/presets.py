"""Tuned hyper-parameters per (algorithm, environment id): conf/preset/<algo.name>/<env.id>.yaml,
or, for the ids of a namespace that have none of their own, conf/preset/<algo.name>/<namespace>.yaml
(ALE/Pong-v5 and ALE/Breakout-v5 share conf/preset/ppo/ALE.yaml).

A preset is the config group `preset`, placed after `algo` in config.yaml's defaults list, so it
is part of the composition: `--cfg job` and `rlpar config` print what will run. What comes later
wins over it: the parallel mode, hardware, an experiment, a table row, the command line. The
choice follows the environment actually trained (`env.id=Acrobot-v1` never runs CartPole's
preset), so the config is composed once without a preset to read `algo.name` and `env.id`, and
`preset=<algo>/<id>` is added to the overrides. A user's own `preset=...` (or `preset=null`: the
algorithm's baseline) is kept. An environment given only by `env.entry_point` has no id
(`env.id=null` is added), so no other environment's preset reaches it.

An algorithm whose conf/algo file builds on another's (conf/algo/apex_sac.yaml names `sac` in its
defaults) takes that one's presets where it has none of its own: `algo=apex_sac env.id=Hopper-v5`
runs conf/preset/sac/Hopper-v5.yaml.

Where no environment's preset applies and the model is recurrent (`model.recurrent`), an
algorithm's `conf/preset/<algo>/recurrent.yaml` is chosen, if it has one: its defaults for
recurrent models (DQN's R2D2 replay learns slowly at the feed-forward baseline's settings).
"""

from __future__ import annotations

import functools
from pathlib import Path

from rlpar.config.conf_dir import CONF_DIR

PRESET_DIR = CONF_DIR / "preset"
GROUP = "preset"
RECURRENT = "recurrent"  # conf/preset/<algo>/recurrent.yaml: an algorithm's defaults for recurrent models


def preset_path(algo_name, env_id) -> Path | None:
    """`<algo>/<env id>.yaml`; for a namespaced id without one (`ALE/Pong-v5`), the namespace's
    shared preset `<algo>/<namespace>.yaml` (`ALE.yaml`: every Atari game)."""
    if not env_id or not algo_name:
        return None
    env_id = str(env_id).rpartition(":")[2]  # Gymnasium's `module:Env-v0` trains Env-v0
    candidates = []
    for algo in preset_algos(str(algo_name)):
        candidates.append(PRESET_DIR / algo / f"{env_id}.yaml")
        if "/" in env_id:
            candidates.append(PRESET_DIR / algo / f"{env_id.split('/', 1)[0]}.yaml")
    return next((path for path in candidates if _is_file(path)), None)


@functools.cache
def preset_algos(algo_name: str) -> tuple[str, ...]:
    """Whose presets an algorithm takes, in order: its own, then those of the algo options its
    conf/algo file builds on (its defaults list: `apex_sac` -> `sac`)."""
    found = [algo_name]
    path = CONF_DIR / "algo" / f"{algo_name}.yaml"
    if "/" not in algo_name and _is_file(path):
        import yaml

        for entry in (yaml.safe_load(path.read_text()) or {}).get("defaults") or ():
            if isinstance(entry, str) and _is_file(CONF_DIR / "algo" / f"{entry}.yaml"):
                found += [name for name in preset_algos(entry) if name not in found]
    return tuple(found)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system: no preset has it (validation names the id)
        return False


def preset_choice(algo_name, env_id) -> str | None:
    """The `preset` group's option for this pair (`ppo/CartPole-v1`, `ppo/ALE`), or None."""
    path = preset_path(algo_name, env_id)
    return None if path is None else path.relative_to(PRESET_DIR).with_suffix("").as_posix()


def chooses_preset(overrides: list[str]) -> bool:
    """Whether the overrides choose the preset themselves (`preset=...`, `preset=null`, `~preset`)."""
    return any(_key(text) == GROUP for text in overrides)


def without_preset(overrides: list[str]) -> list[str]:
    """The overrides less those that choose the preset."""
    return [text for text in overrides if _key(text) != GROUP]


def turns_presets_off(text: str) -> bool:
    """`preset=null` or `~preset`: the algorithm's baseline, whatever the environment."""
    return _key(text) == GROUP and (text.startswith("~") or text.split("=", 1)[-1].strip().lower() == "null")


def _key(text: str) -> str:
    return text.split("=", 1)[0].lstrip("+~")


def entry_point_overrides(overrides: list[str]) -> list[str]:
    """`env.id=null` when the command sets `env.entry_point` but not `env.id`: the id left from
    the env group (CartPole-v1) would name the run, choose a preset and fill config.yaml."""
    keys = {_key(text) for text in overrides}
    sets_entry_point = any(
        _key(text) == "env.entry_point" and not text.endswith("=null") and "=" in text for text in overrides
    )
    return ["env.id=null"] if sets_entry_point and "env.id" not in keys else []


def preset_override(choice: str) -> str:
    """The override that selects `choice` (quoted: an id may hold characters Hydra would parse)."""
    return f"{GROUP}='{choice}'"


def with_preset(overrides: list[str], compose) -> list[str]:
    """`overrides`, plus `env.id=null` for an entry point and the preset of the (algo.name,
    env.id) they compose to, unless they choose one. `compose(overrides)` composes without
    the hydra node. A sweep (`-m algo=ppo,dqn`) gets its preset per job (rlpar/cli.py run_job)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [*overrides, *entry_point_overrides(overrides)]
    if chooses_preset(overrides):  # the group's default is null, and Hydra refuses `group=null`
        return [text for text in overrides if not turns_presets_off(text)]
    parsed = OverridesParser.create().parse_overrides([o for o in overrides if not o.startswith("hydra.")])
    if any(o.is_sweep_override() for o in parsed):
        return overrides
    deciding = _deciding(overrides)
    if deciding in _CHOICES:
        choice = _CHOICES[deciding]
    else:
        cfg = compose(overrides)
        if cfg.get("resume"):  # the run's own config, preset and all, is read from its directory
            return overrides
        choice = wanted_preset(cfg)
        if not any(_is_interpolation(cfg, key) for key in ("algo.name", "env.id")):
            _CHOICES[deciding] = choice
    return overrides if choice is None else [*overrides, preset_override(choice)]


# The preset each set of deciding overrides composed to: a composition costs about 0.1 s, and a
# process that composes many configs (tests, sweeps, notebooks) mostly varies other keys.
_CHOICES: dict[tuple[str, ...], str | None] = {}
_DECIDING_KEYS = ("algo.name", "env.id", "env.entry_point", "resume", "model.recurrent")


def _deciding(overrides: list[str]) -> tuple[str, ...]:
    """The overrides that can change `algo.name`, `env.id` or `resume`: group choices (no dot in
    the key, save the top-level values of config.yaml that are no group), those keys, and Hydra's
    own (a search path adds groups). The rest only set values under them."""
    return tuple(
        text
        for text in overrides
        if _key(text) in _DECIDING_KEYS
        or _key(text).startswith("hydra.")
        or ("." not in _key(text) and _key(text) not in _plain_top_level_keys())
    )


@functools.cache
def _plain_top_level_keys() -> frozenset[str]:
    import yaml

    config = yaml.safe_load((CONF_DIR / "config.yaml").read_text()) or {}
    return frozenset(
        key for key, value in config.items() if not isinstance(value, dict) and key not in ("defaults", "resume")
    )


def _is_interpolation(cfg, key: str) -> bool:
    """Whether the value comes from elsewhere (`${...}`), which other overrides may change."""
    from omegaconf import OmegaConf

    parent, _, leaf = key.rpartition(".")
    container = OmegaConf.select(cfg, parent, default=None)
    return container is not None and leaf in container and OmegaConf.is_interpolation(container, leaf)


def _select(cfg, key: str):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)


def wanted_preset(cfg) -> str | None:
    """The preset a composed config's (algo.name, env.id) call for; without one, the
    algorithm's preset for recurrent models when the model is recurrent."""
    algo_name = _select(cfg, "algo.name")
    choice = preset_choice(algo_name, _select(cfg, "env.id"))
    if choice is None and algo_name and _select(cfg, "model.recurrent") is not None:
        return next(
            (
                f"{algo}/{RECURRENT}"
                for algo in preset_algos(str(algo_name))
                if _is_file(PRESET_DIR / algo / f"{RECURRENT}.yaml")
            ),
            None,
        )
    return choice


def preset_line(cfg, choice: str | None) -> str:
    """The one line a run prints about its preset."""
    algo_name, env_id = _select(cfg, "algo.name"), _select(cfg, "env.id")
    env_name = env_id or _select(cfg, "env.entry_point")
    if choice is None:
        return (
            f"rlpar: no tuned {algo_name} preset for {env_name}: training with {algo_name}'s baseline "
            f"hyper-parameters (conf/algo/{algo_name}.yaml)"
        )
    path = PRESET_DIR / f"{choice}.yaml"
    where = path.relative_to(CONF_DIR.parent) if path.is_file() else f"preset={choice}"
    if choice == preset_choice(algo_name, env_id):
        return f"rlpar: {algo_name} preset for {env_id} ({where})"
    if choice == wanted_preset(cfg):
        return f"rlpar: {algo_name} preset for recurrent models, {env_name} having none of its own ({where})"
    return f"rlpar: preset {choice} chosen on the command line ({where})"
