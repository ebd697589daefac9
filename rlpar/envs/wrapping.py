"""`env.wrappers`: Gymnasium wrappers put around each environment, in order, wherever it is built;
and, for spaces rlpar cannot take (text, graphs, sequences), the wrapper that turns them into ones
it can, named in the refusal.

An entry is a wrapper class by import path (`minigrid.wrappers.ImgObsWrapper`) or a mapping of
its `_target_` and keyword arguments (`{_target_: gymnasium.wrappers.FilterObservation,
filter_keys: [image]}`).
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

from rlpar.envs.spaces import supported_observation_space

# The wrappers a package's own users put around its environments when their observations hold text:
# (the environment class's top-level module, the wrappers, what each gives).
PACKAGE_WRAPPERS = {
    "minigrid": (
        ("minigrid.wrappers.ImgObsWrapper", "the agent's 7x7x3 view as an image"),
        ("minigrid.wrappers.FlatObsWrapper", "the view and the mission as one vector"),
    ),
}


def wrapper_target(entry) -> tuple[str, dict]:
    """(import path, keyword arguments) of one `env.wrappers` entry."""
    if isinstance(entry, Mapping):
        kwargs = {key: value for key, value in entry.items() if key != "_target_"}
        return entry["_target_"], kwargs
    return entry, {}


def entry_shape_problem(index: int, entry) -> str | None:
    """Why an entry is neither an import path nor a mapping with a `_target_`, or None."""
    if isinstance(entry, str) and entry:
        return None
    if isinstance(entry, Mapping) and isinstance(entry.get("_target_"), str) and entry["_target_"]:
        return None
    return (
        f"env.wrappers[{index}]: expected a wrapper class by import path, such as "
        f"gymnasium.wrappers.FlattenObservation, or {{_target_: <class>, <keyword>: <value>}}, got {entry!r}"
    )


def wrapper_problems(entries, import_object) -> list[str]:
    """One line per entry that cannot be imported or is not a gymnasium.Wrapper class."""
    problems = []
    for index, entry in enumerate(entries):
        target, _ = wrapper_target(entry)
        try:
            wrapper = import_object(target)
        except Exception as err:  # noqa: BLE001 - a user's module may raise anything on import
            problems.append(f"env.wrappers[{index}]: cannot import '{target}' ({type(err).__name__}: {err})")
            continue
        if not (isinstance(wrapper, type) and issubclass(wrapper, gym.Wrapper)):
            problems.append(
                f"env.wrappers[{index}]: '{target}' is not a gymnasium.Wrapper class (such as "
                f"gymnasium.wrappers.FlattenObservation or an ObservationWrapper of your own)"
            )
    return problems


def apply_wrappers(env: gym.Env, entries, import_object) -> gym.Env:
    """`env` inside each wrapper of `entries`, the first innermost."""
    for entry in entries:
        target, kwargs = wrapper_target(entry)
        env = import_object(target)(env, **kwargs)
    return env


def unsupported_space_hint(env: gym.Env) -> str:
    """A clause naming the wrapper that makes `env`'s observations ones rlpar takes: the one its
    package's users use, else a FilterObservation of the keys rlpar takes, else a wrapper of one's own."""
    space = env.observation_space
    if supported_observation_space(space):
        return "; map the actions to a Box or Discrete space with a gymnasium.ActionWrapper of your own in env.wrappers"
    package = type(env.unwrapped).__module__.split(".")[0]
    if package in PACKAGE_WRAPPERS:
        options = " or ".join(f"env.wrappers=[{target}] ({gives})" for target, gives in PACKAGE_WRAPPERS[package])
        return f"; use {options}"
    if isinstance(space, gym.spaces.Dict):
        keys = [key for key, sub in space.spaces.items() if supported_observation_space(sub)]
        if keys:
            return (
                f"; keep the keys rlpar takes with env.wrappers=[{{_target_: gymnasium.wrappers.FilterObservation, "
                f"filter_keys: [{', '.join(map(str, keys))}]}}], or turn the others into arrays with a "
                f"gymnasium.ObservationWrapper of your own in env.wrappers"
            )
    return (
        "; turn them into a Box with a gymnasium.ObservationWrapper of your own: "
        "env.wrappers=[my_module.MyObservationWrapper]"
    )
