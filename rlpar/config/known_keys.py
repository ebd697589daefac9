"""Which keys each part of the config takes, so that a typo is refused instead of ignored.

A node with `_target_` takes what the class it names declares: its typed config's fields
(rlpar.typed_config), or, for a class without one (a user's algorithm), its `__init__`'s
keywords. The class is imported to be asked (an algorithm's module imports torch, about a second).
The other nodes take what rlpar's own config files give them.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from dataclasses import fields
from functools import cache

import yaml

from rlpar.config.conf_dir import CONF_DIR
from rlpar.errors import first_line
from rlpar.typed_config import accepted_keys, capabilities, declared_keys

# Arguments rlpar's builder passes itself: set in a config, they would clash with it.
SUPPLIED_BY_BUILD = {
    "parallel": {
        "env_spec",
        "policy_spec",
        "num_workers",
        "envs_per_worker",
        "rollout_length",
        "seed",
        "worker_class",
        "worker_options",
    },
    "algo": {"sampler", "policy_spec", "total_steps", "seed", "device"},
    "logger": {"run_dir", "config"},
    "checkpoint": {"run_dir"},
    "model": {"obs_dim", "action", "obs_dtype", "image_shape", "channels_last", "observation_keys"},
}
# Keys of the algo group that describe the sampler and the network, not the learner.
ALGO_KEYS_NOT_FOR_LEARNER = ("name", "rollout_length")
FREE_FORM = {"env.kwargs", "logger.wandb", "hydra"}  # passed through to code rlpar does not own


@cache
def imported_class(target: str) -> type:
    """The class `target` ("package.module.Class") names; ImportError, in one line, where it
    cannot be imported."""
    module_name, _, class_name = target.rpartition(".")
    try:
        spec = importlib.util.find_spec(module_name) if module_name else None
    except (ImportError, ValueError):  # a parent package that is not there
        spec = None
    if spec is None:
        raise ImportError(
            f"cannot find module '{module_name}' (searched: installed packages, PYTHONPATH, and the "
            f"directory main.py or `rlpar train` was started in)"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any failure of a user's module is reported as its own line
        raise ImportError(f"cannot import module '{module_name}': {type(err).__name__}: {first_line(err)}") from err
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ImportError(f"module '{module_name}' has no class '{class_name}'")
    return cls


@cache
def algorithm_options() -> dict[str, dict]:
    """The algo group's options (conf/algo/<name>.yaml) and what each one's algorithm declares."""
    options = {}
    for path in sorted((CONF_DIR / "algo").glob("*.yaml")):
        target = (yaml.safe_load(path.read_text()) or {}).get("_target_")
        if isinstance(target, str):
            options[path.stem] = capabilities(imported_class(target))
    return options


@cache
def _group_file_keys(group: str, node: str) -> frozenset[str]:
    """Keys under `node` in any option of a `@package _global_` group (hardware: hardware, ray)."""
    keys = set()
    for path in (CONF_DIR / group).glob("*.yaml"):
        content = yaml.safe_load(path.read_text()) or {}
        keys |= set(content.get(node) or {})
    return frozenset(keys)


@cache
def top_level_keys() -> frozenset[str]:
    """config.yaml's own keys, the config groups, and what `@package _global_` options set."""
    keys = set(yaml.safe_load((CONF_DIR / "config.yaml").read_text())) - {"defaults"}
    for path in CONF_DIR.glob("*/*.yaml"):
        keys.add(path.parent.name)
        if path.read_text().startswith("# @package _global_"):
            keys |= set(yaml.safe_load(path.read_text()) or {}) - {"defaults"}
    return frozenset(keys)


def allowed_keys(path: str, node: dict) -> tuple[frozenset[str], str] | None:
    """(keys the node at `path` takes, who takes them), or None where any key goes."""
    if path in FREE_FORM:
        return None
    if path == "":
        return top_level_keys(), "rlpar's config"
    if path == "env":
        from rlpar.envs.factory import EnvSpec

        return frozenset(f.name for f in fields(EnvSpec)), "env"
    if path == "env.opponent_pool":
        from rlpar.selfplay.pool import OpponentPoolConfig

        return declared_keys(OpponentPoolConfig), "env.opponent=pool (rlpar.selfplay.pool)"
    if path in ("hardware", "ray"):
        return _group_file_keys("hardware", path), path
    target = node.get("_target_")
    if not isinstance(target, str):
        return None
    extra = set(ALGO_KEYS_NOT_FOR_LEARNER) if path == "algo" else set()
    taken = accepted_keys(imported_class(target)) - SUPPLIED_BY_BUILD.get(path, set())
    return frozenset(taken | extra | {"_target_"}), target


def unknown_key_problems(config: dict, path: str = "") -> list[str]:
    """One line per key that no part of rlpar takes, with the nearest valid key when there is one."""
    try:
        allowed = allowed_keys(path, config)
    except (ImportError, SyntaxError) as err:  # a _target_ that cannot be read: named with its place
        return [f"{path}._target_: {err}"]
    problems = []
    for key, value in config.items():
        full = f"{path}.{key}" if path else str(key)
        if allowed is not None and key not in allowed[0]:
            hint = (
                did_you_mean(str(key), allowed[0], path) or f"; it takes {', '.join(sorted(allowed[0] - {'_target_'}))}"
            )
            problems.append(f"{full}: unknown key (not taken by {allowed[1]}){hint}")
        elif isinstance(value, dict):
            problems.extend(unknown_key_problems(value, full))
    return problems


def did_you_mean(word: str, options, prefix: str = "") -> str:
    """The nearest option by spelling, or by initials (learning_rate -> lr), as a clause."""
    options = sorted(map(str, options))
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    close = close or [o for o in options if _initials(word) == o or _initials(o) == word][:1]
    if not close:
        return ""
    return f"; did you mean {prefix + '.' if prefix else ''}{close[0]}?"


def _initials(name: str) -> str:
    parts = name.split("_")
    return "".join(p[0] for p in parts if p) if len(parts) > 1 else ""
