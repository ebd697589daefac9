"""Atari through ale-py: lazy registration of the `ALE/...` ids, Gymnasium's Atari preprocessing,
and pickling that keeps the emulator's state (exact resume pickles vector envs).

`env.atari` (a mapping, conf/env/atari.yaml) turns the preprocessing on: the ALE env is built
with `frameskip=1`, Gymnasium's `AtariPreprocessing` skips `frame_skip` frames per action
(max-pooling the last two), takes 1..`noop_max` no-ops on reset, converts to grayscale and resizes
to `screen_size`, and `FrameStackObservation` stacks `frame_stack` frames:
Box(0, 255, (4, 84, 84), uint8) with the defaults. Sticky actions and the action set are the ALE
env's own arguments (`env.kwargs.repeat_action_probability`, `full_action_space`).
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym

ALE_NAMESPACE = "ALE/"
ALE_ENTRY_POINT = "ale_py.env:AtariEnv"
ALE_PIN = "ale-py==0.12.1"
OPENCV_PIN = "opencv-python-headless==4.14.0.94"
V5_FRAMESKIP = 4  # the ALE v5 envs' own frameskip, when rlpar's preprocessing is off

ATARI_DEFAULTS: dict[str, Any] = {
    "frame_skip": 4,  # agent steps x frame_skip = emulator frames
    "noop_max": 30,
    "screen_size": 84,
    "grayscale": True,
    "frame_stack": 4,
    "terminal_on_life_loss": False,
}
_POSITIVE = ("frame_skip", "screen_size", "frame_stack")
_BOOLEAN = ("grayscale", "terminal_on_life_loss")

_registered = False


def register_ale() -> None:
    """Import ale-py and register its ids with Gymnasium (once per process: the learner, every
    worker subprocess and Ray actor calls it through the factory). Raises ImportError."""
    global _registered
    if _registered:
        return
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner from every emulator
    gym.register_envs(ale_py)
    _registered = True


def needs_ale(env_id: str | None) -> bool:
    """An `ALE/...` id, or an id Gymnasium does not know yet that ale-py might register
    (`PongNoFrameskip-v4`)."""
    if not env_id:
        return False
    return env_id.startswith(ALE_NAMESPACE) or env_id not in gym.registry


def ensure_registered(env_id: str | None) -> str | None:
    """Register ale-py's ids when `env_id` may be one; the import error as a line when ale-py
    is missing and the id needs it, else None."""
    if not needs_ale(env_id) or _registered:
        return None
    try:
        register_ale()
    except ImportError as err:
        if env_id and env_id.startswith(ALE_NAMESPACE):
            return f"env.id: '{env_id}' needs ale-py, which is not installed (pip install {ALE_PIN}; {err})"
    return None


def is_ale_id(env_id: str | None) -> bool:
    if not env_id:
        return False
    ensure_registered(env_id)
    spec = gym.registry.get(env_id)
    return spec is not None and spec.entry_point == ALE_ENTRY_POINT


def atari_options(options: dict | None) -> dict[str, Any]:
    """`env.atari` over the defaults; ValueError (one line) for an unknown key or a bad value."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(ATARI_DEFAULTS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], ATARI_DEFAULTS, n=1)
        hint = f"did you mean env.atari.{close[0]}?" if close else f"it takes {', '.join(ATARI_DEFAULTS)}"
        raise ValueError(f"env.atari.{unknown[0]}: unknown key; {hint}")
    merged = {**ATARI_DEFAULTS, **options}
    for key in _POSITIVE:
        if not _is_int(merged[key]) or merged[key] < 1:
            raise ValueError(f"env.atari.{key}: expected a positive integer, got {merged[key]!r}")
    if not _is_int(merged["noop_max"]) or merged["noop_max"] < 0:
        raise ValueError(f"env.atari.noop_max: expected an integer >= 0, got {merged['noop_max']!r}")
    for key in _BOOLEAN:
        if not isinstance(merged[key], bool):
            raise ValueError(f"env.atari.{key}: expected true or false, got {merged[key]!r}")
    return merged


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def atari_problem(spec) -> str | None:
    """A one-line reason why `spec.atari` cannot be applied, or None."""
    if not isinstance(spec.atari, dict):
        return f"env.atari: expected a mapping such as {{frame_skip: 4}} or null, got {spec.atari!r}"
    try:
        atari_options(spec.atari)
    except ValueError as err:
        return str(err)
    if spec.entry_point or not is_ale_id(spec.id):
        return (
            f"env.atari: Atari preprocessing needs an ale-py id such as ALE/Pong-v5, not "
            f"{spec.id or spec.entry_point} (set env.atari=null for other environments)"
        )
    frameskip = spec.kwargs.get("frameskip", 1)
    if frameskip != 1:
        return (
            f"env.kwargs.frameskip: {frameskip!r} with env.atari, which skips frames itself "
            f"(env.atari.frame_skip); leave env.kwargs.frameskip out"
        )
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError as err:
        return f"env.atari: Gymnasium's AtariPreprocessing needs OpenCV (pip install {OPENCV_PIN}; {err})"
    return None


def make_atari_kwargs(spec) -> dict:
    """gym.make's keyword arguments: the ALE env steps single frames; the wrapper skips."""
    return {**spec.kwargs, "frameskip": 1}


def wrap_ale(env: gym.Env, atari: dict | None, max_episode_steps: int | None = None) -> gym.Env:
    """The picklable ALE env, preprocessed when `atari` (env.atari) is given; `max_episode_steps`
    then counts agent steps (the time limit sits above the frame skip, below the life-loss
    wrapper, which must see it to restart the game)."""
    env = PicklableALE(env)
    if atari is None:
        return env
    options = atari_options(atari)
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=options["noop_max"],
        frame_skip=options["frame_skip"],
        screen_size=options["screen_size"],
        terminal_on_life_loss=False,  # Gymnasium's would restart the whole game at every life lost
        grayscale_obs=options["grayscale"],
        grayscale_newaxis=False,
        scale_obs=False,  # uint8 end to end; the learner's network scales
    )
    if max_episode_steps:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    if options["terminal_on_life_loss"]:
        env = EpisodicLife(env)
    return gym.wrappers.FrameStackObservation(env, options["frame_stack"])


def frames_per_step(spec) -> int:
    """Emulator frames per agent step: `env.atari.frame_skip`, the ALE env's own integer
    frameskip without it (4 for v5 ids), 1 for every other environment."""
    if spec is None or getattr(spec, "entry_point", None) or not is_ale_id(getattr(spec, "id", None)):
        return 1
    if spec.atari is not None:
        return int(atari_options(spec.atari)["frame_skip"])
    frameskip = spec.kwargs.get("frameskip", gym.registry[spec.id].kwargs.get("frameskip", 1))
    return frameskip if _is_int(frameskip) else 1  # a random (low, high) frameskip: unknown, so 1


class PicklableALE(gym.Wrapper):
    """Pickles the emulator's state with the env. ale-py's `AtariEnv` pickles only its
    constructor arguments, so an unpickled env is a new, unreset game with a fresh seed: this
    wrapper adds the emulator's state (`cloneState(include_rng=True)`: the screen, frame counters
    and the sticky-action generator) and the env's own generator (no-op resets), and restores both."""

    def __getstate__(self):
        state = self.__dict__.copy()
        atari = self.env.unwrapped
        state["_ale_state"] = atari.ale.cloneState(include_rng=True)
        state["_np_random"] = atari._np_random
        state["_np_random_seed"] = getattr(atari, "_np_random_seed", None)
        return state

    def __setstate__(self, state):
        ale_state = state.pop("_ale_state")
        np_random, np_random_seed = state.pop("_np_random"), state.pop("_np_random_seed")
        self.__dict__.update(state)
        atari = self.env.unwrapped
        atari.ale.restoreState(ale_state)
        atari._np_random = np_random
        atari._np_random_seed = np_random_seed


class EpisodicLife(gym.Wrapper):
    """Each life lost ends the episode for learning; only a real game over resets the game (the
    Nature DQN's and OpenAI Baselines' EpisodicLifeEnv; Gymnasium's own `terminal_on_life_loss`
    restarts the whole game instead). rlpar then counts returns per life, not per game."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed=None, options=None):
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # a life lost: carry on from where the game is, with one no-op
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info
