"""Command-line overrides that Hydra would refuse with a traceback or without naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlpar.errors import first_line


def override_problems(overrides: list[str]) -> list[str]:
    """Command-line overrides Hydra would refuse with a traceback, or in its own words without a
    suggestion: malformed ones like `algo.lr=[1,2`, group choices that are not names like
    `algo=3`, unknown options like `parallel=distibuted`, and unknown keys like `algo.learning_rate=1`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    conf_dirs = _conf_dirs(parser, overrides)
    problems, parsed = [], []
    for text in overrides:
        if text.startswith("-") or "=" not in text:
            continue  # Hydra flags and their values (-m, --cfg job); Hydra names a bare `key` itself
        try:
            override = parser.parse_overrides([text])[0]
        except Exception as err:  # Hydra's parse errors, one per kind of syntax mistake
            problems.append(f"{text.partition('=')[0]}: '{text}' is not a valid override ({_parse_reason(err)})")
            continue
        problem = (
            _group_choice_problem(override, text, conf_dirs)
            or _hydra_dir_problem(override)
            or _nested_group_problem(override, text, overrides, conf_dirs)
        )
        if problem:
            problems.append(problem)
        parsed.append(override)
    return problems or _unknown_key_problems(parsed, conf_dirs)


def _conf_dirs(parser, overrides: list[str]) -> list[Path] | None:
    """rlpar's conf/, then the user's `hydra.searchpath` directories (and Hydra's `--config-dir`),
    whose groups' options are options too (an algorithm of their own: algo=<theirs>); None for a
    path only Hydra can read (`pkg://`): Hydra then names unknown options itself."""
    from rlpar.config.conf_dir import CONF_DIR

    dirs = [CONF_DIR]
    for flag, value in zip(overrides, overrides[1:]):
        if flag in ("-cd", "--config-dir"):
            dirs.append(Path(value))
    for text in overrides:
        if text.startswith("--config-dir="):
            dirs.append(Path(text.partition("=")[2]))
        if not text.startswith("hydra.searchpath="):
            continue
        try:
            paths = parser.parse_overrides([text])[0].value()
        except Exception:  # reported with the other malformed overrides
            return dirs
        for path in paths if isinstance(paths, list) else [paths]:
            scheme, separator, rest = str(path).partition("://")
            if separator and scheme != "file":
                return None
            dirs.append(Path(rest if separator else scheme))
    return dirs


def _parse_reason(err: Exception) -> str:
    reason = first_line(err)
    return "unexpected character; quote values with special characters" if "LexerNoViableAlt" in reason else reason


def _group_choice_problem(override, text: str, conf_dirs: list[Path] | None) -> str | None:
    from rlpar.config.known_keys import did_you_mean

    group = override.key_or_group
    stored = stored_options(group)
    if conf_dirs is None or not (stored or any((d / group).is_dir() for d in conf_dirs)):
        return None
    from rlpar.config.presets import GROUP as PRESET_GROUP

    options = sorted(
        {option for d in conf_dirs if (d / group).is_dir() for option in group_options(d / group)} | stored
    )
    if override.is_sweep_override():
        values = list(override.sweep_iterator()) if override.is_discrete_sweep() else []
    else:
        values = [override.value()]
    if not group:
        return f"'{text}': no key before '='"
    for value in values:
        if value is None and (override.is_delete() or group == PRESET_GROUP):  # preset=null: the baseline
            continue
        if isinstance(value, str) and value in options:
            continue
        if isinstance(value, str):
            return (
                f"{group}: '{value}' is not an option of this config group"
                f"{did_you_mean(value, options)} (one of: {', '.join(options)})"
            )
        if not isinstance(value, dict):
            return (
                f"{group}: '{text.partition('=')[2]}' is not an option of this config group "
                f"(one of: {', '.join(options)})"
            )
    return None


def _nested_group_problem(override, text: str, overrides: list[str], conf_dirs: list[Path] | None) -> str | None:
    """A choice of a group that only another group's option brings in (`benchmark=classic`, which
    `experiment=benchmark` brings), given without that option: Hydra would answer that it finds no
    `benchmark` to override and suggest `+benchmark=...`, which runs without the experiment."""
    group = override.key_or_group
    if (
        conf_dirs is None
        or override.is_add()
        or override.is_force_add()
        or override.is_delete()
        or "/" in group
        or not any((d / group).is_dir() for d in conf_dirs)
        or group in _primary_groups(conf_dirs[0])
    ):
        return None
    parents = [f"{parent}={option}" for d in conf_dirs for parent, option in _options_bringing(d, group)]
    if not parents or any(choice in overrides for choice in parents):
        return None
    return f"{group}: chosen with {' or '.join(parents)} (e.g. python main.py -m {parents[0]} {text})"


def _primary_groups(conf_dir: Path) -> set[str]:
    """The groups config.yaml's defaults list chooses (`- env: cartpole`, `- optional experiment: null`)."""
    import yaml

    path = conf_dir / "config.yaml"
    defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults", []) if path.is_file() else []
    return {
        str(key).split()[-1].lstrip("/").split("@")[0] for entry in defaults if isinstance(entry, dict) for key in entry
    }


def _options_bringing(conf_dir: Path, group: str) -> list[tuple[str, str]]:
    """(group, option) of the configs under `conf_dir` whose defaults list chooses `/group`."""
    import yaml

    found = []
    for path in sorted(conf_dir.glob("*/*.yaml")):
        try:
            defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults", [])
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if any(
            isinstance(entry, dict) and any(str(key).split()[-1] == f"/{group}" for key in entry)
            for entry in defaults or []
        ):
            found.append((path.parent.name, path.stem))
    return found


SHARED = "shared"  # a group's folder of configs its options share through `defaults:` (conf/algo/shared/)


def group_options(group_dir) -> list[str]:
    """A config group's options, those in sub-folders included (`preset=ppo/CartPole-v1`)."""
    return sorted(
        path.relative_to(group_dir).with_suffix("").as_posix()
        for path in group_dir.rglob("*.yaml")
        if path.relative_to(group_dir).parts[0] != SHARED
    )


def stored_options(group: str) -> set[str]:
    """A group's options that rlpar registers in Hydra's ConfigStore (`benchmark_row`: the rows of
    conf/benchmark/rows.csv, rlpar.config.benchmark_rows); Hydra's own groups left to Hydra."""
    from hydra.core.config_store import ConfigStore

    if not group or group.split("/")[0] == "hydra":
        return set()
    try:
        return {name.removesuffix(".yaml") for name in ConfigStore.instance().list(group)}
    except OSError:  # no such group in the store
        return set()


HYDRA_DIRS = ("hydra.run.dir", "hydra.sweep.dir")  # Hydra makes these itself, with a traceback if it cannot


def _hydra_dir_problem(override) -> str | None:
    from rlpar.config.validate import directory_problem

    value = override.value() if override.key_or_group in HYDRA_DIRS and not override.is_sweep_override() else None
    if not isinstance(value, str) or "${" in value:  # an interpolation is Hydra's to resolve
        return None
    problem = directory_problem(value)
    return f"{override.key_or_group}: {problem}" if problem else None


def _unknown_key_problems(parsed: list, conf_dirs: list[Path] | None) -> list[str]:
    """Keys set without `+` that the composed config does not have. Composed with the command's
    group choices; skipped when a group choice is swept (the key may exist in one option only)."""
    from omegaconf import OmegaConf

    from rlpar.config.changes import resume_change_problems
    from rlpar.config.compose import compose_config
    from rlpar.config.known_keys import did_you_mean

    if conf_dirs is None:
        return []
    is_group = [any((d / o.key_or_group).is_dir() for d in conf_dirs) for o in parsed]
    keys = [
        o
        for o, group in zip(parsed, is_group)
        if not group
        and o.is_force_add() is False
        and not o.is_add()
        and not o.is_delete()
        and not o.key_or_group.startswith("hydra")
    ]
    if not keys or any(o.is_sweep_override() for o, group in zip(parsed, is_group) if group):
        return []
    try:
        # preset=null: no composition to choose one; a preset only sets keys the config has
        search_path = ",".join(f"'file://{d.resolve()}'" for d in conf_dirs[1:])
        cfg = compose_config(
            [
                *([f"hydra.searchpath=[{search_path}]"] if search_path else []),
                *(o.input_line for o, group in zip(parsed, is_group) if group),
                "preset=null",
            ]
        )
    except Exception:  # anything else wrong with the command: Hydra reports it in its own words
        return []
    unknown = []  # (key, advice to add it)
    for override in keys:
        key = override.key_or_group
        node: Any = cfg  # a DictConfig, then the Node under each part
        found: list[str] = []
        for part in key.split("."):  # by name, without resolving interpolations
            if not OmegaConf.is_dict(node) or part not in node.keys():
                break
            node = node._get_node(part)
            found.append(part)
        if len(found) == key.count(".") + 1:
            continue
        parent = ".".join(found)
        siblings = list(node.keys()) if OmegaConf.is_dict(node) else []
        name = key.split(".")[len(found)]
        unknown.append(
            (
                key,
                f"{parent + '.' if parent else ''}{name}: not a key of the config"
                f"{did_you_mean(name, siblings, parent)} (add a new key with +{key}=...)",
            )
        )
    if not unknown:
        return []
    if any(o.key_or_group == "resume" and not o.is_delete() for o in parsed):  # the run's config may have the key
        return [(resume_change_problems([key]) or [advice])[0] for key, advice in unknown]
    refused = _refused_when_added([o.input_line for o in parsed], [key for key, _ in unknown], search_path)
    return [refused.get(key) or advice for key, advice in unknown]


def _refused_when_added(overrides: list[str], keys: list[str], search_path: str) -> dict[str, str | None]:
    """What validation says about `keys` once added with `+` (the advice above), by key: a key
    its component does not take, or one an algorithm refuses (model.recurrent for SAC). Advice
    that would only be refused next is replaced by the refusal."""
    from rlpar.config.compose import compose_config
    from rlpar.config.validate import ConfigError, validate_config

    adding = [f"+{o}" if o.partition("=")[0] in keys else o for o in overrides if not o.startswith("hydra.")]
    try:
        cfg = compose_config([*([f"hydra.searchpath=[{search_path}]"] if search_path else []), *adding])
        validate_config(cfg, check_env=False)
    except ConfigError as err:
        return {key: next((p for p in err.problems if p.startswith(f"{key}:")), None) for key in keys}
    except Exception:  # the command cannot be composed so: keep the advice
        return {}
    return {}
