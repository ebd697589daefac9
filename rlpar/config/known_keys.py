"""Which keys each part of the config takes, so that a typo is refused instead of ignored.

A node with `_target_` takes its class's keyword arguments, read from the class's source (so
validation never imports torch, 2 s here); a `**kwargs` there is forwarded to the base class, or
to the class named by `KEYWORDS_FORWARDED_TO`.
The other nodes take what rlpar's own config files give them.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
from dataclasses import fields
from functools import cache
from pathlib import Path

import yaml

from rlpar.config.conf_dir import CONF_DIR

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
    "model": {"obs_dim", "action", "obs_dtype", "image_shape", "channels_last"},
}
# Keys of the algo group that describe the sampler and the network, not the learner.
ALGO_KEYS_NOT_FOR_LEARNER = ("name", "rollout_length")
FREE_FORM = {"env.kwargs", "logger.wandb", "hydra"}  # passed through to code rlpar does not own


def _class_source(target: str) -> tuple[ast.Module, ast.ClassDef, str]:
    """The parsed module of class `target` ("package.module.Class") and the class's node."""
    module_name, _, class_name = target.rpartition(".")
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin:
        raise ImportError(
            f"cannot find module '{module_name}' (searched: installed packages, PYTHONPATH, and the "
            f"directory main.py or `rlpar train` was started in)"
        )
    tree = ast.parse(Path(spec.origin).read_text())
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise ImportError(f"module '{module_name}' has no class '{class_name}'")
    return tree, cls, module_name


def _base_targets(tree: ast.Module, cls: ast.ClassDef, module_name: str) -> list[str]:
    """The base classes of `cls` as "package.module.Class", in order, without object and ABC."""
    targets = []
    for base in (b.id for b in cls.bases if isinstance(b, ast.Name)):
        if base in ("object", "ABC", "Protocol"):
            continue
        imported = (
            f"{node.module}.{base}"
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and any(a.name == base and a.asname is None for a in node.names)
        )
        targets.append(next(imported, f"{module_name}.{base}"))
    return targets


@cache
def keyword_parameters(target: str) -> frozenset[str]:
    """The keyword arguments class `target` ("package.module.Class") accepts."""
    tree, cls, module_name = _class_source(target)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None and any(_is_dataclass_decorator(d) for d in cls.decorator_list):
        return frozenset(
            n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        )
    names = set() if init is None else {a.arg for a in [*init.args.args[1:], *init.args.kwonlyargs]}
    if init is None or init.args.kwarg is not None:
        forwarded = _forwarded_to(cls)
        for base in [forwarded] if forwarded else _base_targets(tree, cls, module_name):
            names |= set(keyword_parameters(base)) - _not_forwarded(cls)
    return frozenset(names)


@cache
def class_attributes(target: str) -> dict:
    """What class `target` declares as literal class attributes (`model_kind = "q_network"`), its
    bases' first (an earlier base's over a later one's, as Python's lookup): a component's
    capabilities, read without importing its module (torch)."""
    tree, cls, module_name = _class_source(target)
    attributes = {}
    for base in reversed(_base_targets(tree, cls, module_name)):
        attributes.update(class_attributes(base))
    for node in cls.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for name in (t.id for t in targets if isinstance(t, ast.Name)):
            try:
                attributes[name] = ast.literal_eval(value) if value is not None else None
            except ValueError:  # not a literal (a class, a call): not a capability
                attributes.pop(name, None)
    return attributes


@cache
def defines_method(target: str, name: str) -> bool:
    """Whether class `target` or one of its bases defines method `name` (read from the source)."""
    tree, cls, module_name = _class_source(target)
    if any(isinstance(n, ast.FunctionDef) and n.name == name for n in cls.body):
        return True
    return any(defines_method(base, name) for base in _base_targets(tree, cls, module_name))


def _forwarded_to(cls: ast.ClassDef) -> str | None:
    """The class a `**kwargs` goes to when it is not the base class (`KEYWORDS_FORWARDED_TO =
    "package.module.Class"`: a multi-agent algorithm's per-policy learners)."""
    for node in cls.body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "KEYWORDS_FORWARDED_TO" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def _not_forwarded(cls: ast.ClassDef) -> set[str]:
    """Base-class keywords a subclass sets itself (`KEYWORDS_NOT_FORWARDED = (...)`), so the
    config may not give them."""
    for node in cls.body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "KEYWORDS_NOT_FORWARDED" for t in node.targets)
            and isinstance(node.value, ast.Tuple)
        ):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return getattr(target, "id", getattr(target, "attr", None)) == "dataclass"


@cache
def algorithm_options() -> dict[str, dict]:
    """The algo group's options (conf/algo/<name>.yaml) and what each one's algorithm declares."""
    options = {}
    for path in sorted((CONF_DIR / "algo").glob("*.yaml")):
        target = (yaml.safe_load(path.read_text()) or {}).get("_target_")
        if isinstance(target, str):
            options[path.stem] = class_attributes(target)
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
    if path in ("hardware", "ray"):
        return _group_file_keys("hardware", path), path
    target = node.get("_target_")
    if not isinstance(target, str):
        return None
    extra = set(ALGO_KEYS_NOT_FOR_LEARNER) if path == "algo" else set()
    return frozenset((keyword_parameters(target) - SUPPLIED_BY_BUILD.get(path, set())) | extra | {"_target_"}), target


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
