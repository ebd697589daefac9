"""Gymnasium ids that packages register when they are imported (MiniGrid, highway-env, ...).

`gym.make` knows only the ids of the packages imported in its process, so the packages an id
needs are imported wherever environments are built (the driver's validation, every worker
subprocess and Ray actor, on every node), in this order, until the id is registered:

1. `env.imports`, and the module of Gymnasium's own `module:Env-v0` form;
2. the package of a known id prefix (KNOWN_PACKAGES), when it is installed (ale-py's `ALE/` ids:
   rlpar/envs/atari.py);
3. the module an id's namespace names (`gymnasium_2048/TwentyFortyEight-v0`), when it is installed;
4. Gymnasium's plugin entry points that installed packages declare (the `gymnasium.envs` group of
   Gymnasium 0.26-0.29, and its `gymnasium.envs.<namespace>` form);
5. the other installed packages that depend on Gymnasium, those whose name is nearest the id first.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
from functools import cache

import gymnasium as gym

# (id prefixes, the module whose import registers them, the name to pip install).
KNOWN_PACKAGES = (
    (("MiniGrid-", "BabyAI-"), "minigrid", "minigrid"),
    (("MiniWorld-",), "miniworld", "miniworld"),
    (
        (
            "highway-",
            "merge-",
            "roundabout-",
            "parking-",
            "intersection-",
            "racetrack-",
            "exit-",
            "two-way-",
            "lane-keeping-",
            "u-turn-",
        ),
        "highway_env",
        "highway-env",
    ),
    (("GymV21Environment-", "GymV26Environment-", "dm_control/", "bsuite/", "meltingpot/"), "shimmy", "shimmy"),
    (
        ("Fetch", "HandManipulate", "HandReach-", "AdroitHand", "PointMaze_", "AntMaze_", "FrankaKitchen-"),
        "gymnasium_robotics",
        "gymnasium-robotics",
    ),
    (("Panda",), "panda_gym", "panda-gym"),
    (("FlappyBird-",), "flappy_bird_gymnasium", "flappy-bird-gymnasium"),
    (("mo-",), "mo_gymnasium", "mo-gymnasium"),
    (("Meta-World/",), "metaworld", "metaworld"),
)
PLUGIN_GROUP = "gymnasium.envs"  # an entry point's name is its namespace; `__root__`: none
ROOT_NAMESPACES = ("__root__", "__internal__")
# Installed packages that depend on Gymnasium but register no single-agent ids on import.
NOT_REGISTERING = frozenset(
    {
        "rlpar",
        "gymnasium",
        "hydra_plugins",
        "pettingzoo",
        "mpe2",
        "envpool",
        "stable_baselines3",
        "sb3_contrib",
        "ray",
        "torchrl",
        "tianshou",
        "cleanrl",
    }
)


class UnknownEnvId(LookupError):
    """No module that rlpar may import registers this id; the message is the line to show."""


def split_module_id(env_id: str) -> tuple[str | None, str]:
    """Gymnasium's `module:Env-v0` -> ("module", "Env-v0"); a plain id -> (None, id)."""
    module, colon, name = env_id.partition(":")
    return (module, name) if colon else (None, env_id)


def register_env_id(env_id: str) -> str | None:
    """Import what registers `env_id` (steps 2-5 above) unless Gymnasium knows it; returns the
    module imported, or None. Raises UnknownEnvId with one line saying what to do."""
    if _known(env_id):
        return None
    return _found_module(env_id)


@cache
def _found_module(env_id: str) -> str | None:
    """Once per process and id: every entry point and package is tried at most once."""
    known = _known_package(env_id)
    if known is not None:
        module, pip_name = known
        if importlib.util.find_spec(module) is None:
            raise UnknownEnvId(
                f"env.id: '{env_id}' comes from the {pip_name} package, which is not installed (pip install {pip_name})"
            )
        importlib.import_module(module)
        if _known(env_id):
            return module
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    if namespace and namespace.isidentifier() and _is_module(namespace):
        try:
            importlib.import_module(namespace)
        except Exception:  # noqa: BLE001 - a module of that name that fails to import is not the one asked for
            pass
        if _known(env_id):
            return namespace
    for name, register in _plugins(env_id):
        _call_plugin(name, register)
        if _known(env_id):
            return register.module
    for module in _gymnasium_packages(env_id):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a package that fails to import is not the one asked for
            continue
        if _known(env_id):
            return module
    raise UnknownEnvId(unknown_id_message(env_id))


def _known(env_id: str) -> bool:
    return env_id in gym.registry


def _known_package(env_id: str) -> tuple[str, str] | None:
    for prefixes, module, pip_name in KNOWN_PACKAGES:
        if env_id.startswith(prefixes):
            return module, pip_name
    return None


_called_plugins: set[str] = set()


def _plugins(env_id: str):
    """(namespace, entry point) of Gymnasium's plugin groups; the id's own namespace first, then
    those whose package name is nearest the id."""
    from importlib.metadata import distributions

    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    found = []
    for point in (point for dist in distributions() for point in dist.entry_points):
        if point.group == PLUGIN_GROUP:
            found.append((point.name, point))
        elif point.group.startswith(PLUGIN_GROUP + "."):
            found.append((point.group[len(PLUGIN_GROUP) + 1 :], point))
    by_namespace = [(None if name in ROOT_NAMESPACES else name, point) for name, point in found]
    return sorted(by_namespace, key=lambda item: (item[0] != namespace, -_likeness(env_id, item[1].module)))


def _call_plugin(namespace: str | None, point) -> None:
    """Load one entry point as Gymnasium's load_plugin_envs did: a function is called (in its
    namespace), a module is imported."""
    if point.value in _called_plugins:
        return
    _called_plugins.add(point.value)
    try:
        loaded = point.load()
        if callable(loaded):
            if namespace is None:
                loaded()
            else:
                with gym.envs.registration.namespace(namespace):
                    loaded()
    except Exception:  # noqa: BLE001 - a broken plugin of another package: the id stays unknown
        return


def _gymnasium_packages(env_id: str) -> list[str]:
    """Top-level modules of installed distributions that require Gymnasium (not as an extra),
    not imported yet, nearest the id first."""
    import sys
    from importlib.metadata import distributions

    modules = set()
    for dist in distributions():
        if any(_requires_gymnasium(text) for text in dist.requires or ()):
            modules |= _top_level_modules(dist)
    modules -= NOT_REGISTERING | set(sys.modules)
    return sorted(modules, key=lambda module: (-_likeness(env_id, module), module))


def _requires_gymnasium(requirement: str) -> bool:
    """`gymnasium>=1.0` yes, `gymnasium; extra == "envs"` no."""
    requirement, _, marker = requirement.partition(";")
    name = re.match(r"[A-Za-z0-9._-]*", requirement.strip())
    assert name is not None  # `*` matches the empty string too
    return name.group().lower() == "gymnasium" and "extra" not in marker


def _top_level_modules(dist) -> set[str]:
    """What a distribution installs to import: its top_level.txt, else the first parts of its files."""
    listed = (dist.read_text("top_level.txt") or "").split()
    if not listed:
        listed = {
            path.parts[0].removesuffix(".py")
            for path in dist.files or ()
            if len(path.parts) > 1 or path.suffix == ".py"
        }
    return {module for module in listed if module.isidentifier() and not module.startswith("_")}


def _likeness(env_id: str, module: str) -> float:
    """How much a package's name resembles an id (minigrid ~ MiniGrid-DoorKey-5x5-v0)."""

    def words(text):
        return re.sub(r"[^a-z0-9]", "", text.lower())

    head = re.split(r"[-/:_]", env_id, maxsplit=1)[0]
    return difflib.SequenceMatcher(None, words(head), words(module.split(".")[0])).ratio()


def unknown_id_message(env_id: str) -> str:
    """One line: what Gymnasium said, and the three ways rlpar takes an environment it cannot find."""
    try:
        gym.spec(env_id)
        said = ""
    except gym.error.Error as err:
        said = f" ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    hint = (
        f"if a package registers it, name it: env.imports=[package] (or env.id=package:{env_id}); "
        f"for a class of your own: env.id=null env.entry_point=module:Class"
    )
    if "." in env_id and "-v" not in env_id and _is_module(env_id):
        hint = f"it is a module: for a PettingZoo environment use env=pettingzoo env.id={env_id}"
    return f"env.id: '{env_id}' is not a registered Gymnasium environment{said}; {hint}"


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
