"""`env.wrappers`: Gymnasium wrappers put around each environment, in order, wherever it is built;
for spaces rlpar cannot take (text, graphs, sequences), the wrapper that turns them into ones
it can, named in the refusal; and `ActionMaskFromInfo`, which moves an action mask an environment
gives in `info` (`env.action_mask_info_key`) into its observation.

An entry is a wrapper class by import path (`minigrid.wrappers.ImgObsWrapper`) or a mapping of
its `_target_` and keyword arguments (`{_target_: gymnasium.wrappers.FilterObservation,
filter_keys: [image]}`).
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from rlpar.envs.spaces import ACTION_MASK_KEY, describe_action_space, supported_observation_space

INNER_OBSERVATION_KEY = "obs"  # where ActionMaskFromInfo puts an observation that is not a Dict

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


def with_mask_space(inner: gym.Space, width: int, info_key: str) -> gym.spaces.Dict:
    """The observation space `inner` with a mask of `width` actions under ACTION_MASK_KEY: a Dict
    gains the key, any other space becomes the Dict's INNER_OBSERVATION_KEY."""
    mask_space = gym.spaces.Box(0, 1, (width,), np.int8)
    if not isinstance(inner, gym.spaces.Dict):
        return gym.spaces.Dict({INNER_OBSERVATION_KEY: inner, ACTION_MASK_KEY: mask_space})
    if ACTION_MASK_KEY in inner.spaces:
        raise ValueError(
            f"env.action_mask_info_key: the observation already holds '{ACTION_MASK_KEY}', where the mask "
            f"from info['{info_key}'] would go; use one of them (env.action_mask_info_key=null reads the "
            f"observation's)"
        )
    return gym.spaces.Dict({**inner.spaces, ACTION_MASK_KEY: mask_space})


def with_mask(obs, info, info_key: str, width: int, where: str, ended: bool) -> dict:
    """Observation `obs` with the mask `info[info_key]` beside it (as `with_mask_space` lays it
    out). A mask is a value per action (a MultiDiscrete action's factors in turn; a tuple of
    per-factor masks, Gymnasium's `MultiDiscrete.sample(mask=...)` form, is joined). An info
    without it raises, except at an episode's end: no action is chosen from a final observation,
    whose mask is then all legal."""
    mask = info.get(info_key) if isinstance(info, Mapping) else None
    if mask is None:
        if not ended:
            keys = ", ".join(map(str, info)) if isinstance(info, Mapping) and info else "none"
            raise ValueError(f"env.action_mask_info_key: the info of {where} has no '{info_key}' (its keys: {keys})")
        legal = np.ones(width, np.int8)
    else:
        parts = mask if isinstance(mask, (tuple, list)) and len(mask) and np.ndim(mask[0]) else [mask]
        legal = np.concatenate([np.asarray(part).reshape(-1) for part in parts]).astype(np.int8)
        if legal.size != width:
            raise ValueError(
                f"env.action_mask_info_key: info['{info_key}'] of {where} has {legal.size} values, but the "
                f"action space has {width} choices (a mask needs one 0/1 value per choice)"
            )
    if isinstance(obs, Mapping):
        return {**obs, ACTION_MASK_KEY: legal}
    return {INNER_OBSERVATION_KEY: obs, ACTION_MASK_KEY: legal}


class ActionMaskFromInfo(gym.Wrapper):
    """An environment that gives its 0/1 mask of the legal actions in `info[info_key]` (at reset
    and at every step, as some Gymnasium environments do), seen as one whose Dict observation
    holds it under ACTION_MASK_KEY, where every algorithm finds it (rlpar.models.action_masks):
    `with_mask_space` and `with_mask`. Each observation takes the mask of the info that comes with
    it (an episode's final observation the final step's), so samplers, batches and replay carry it
    unchanged."""

    def __init__(self, env: gym.Env, info_key: str):
        super().__init__(env)
        self.info_key = info_key
        self.width = describe_action_space(env.action_space).size
        self.observation_space = with_mask_space(env.observation_space, self.width, info_key)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return with_mask(obs, info, self.info_key, self.width, "the reset", ended=False), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        ended = terminated or truncated
        return with_mask(obs, info, self.info_key, self.width, "a step", ended), reward, terminated, truncated, info
