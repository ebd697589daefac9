"""`env.vectorization=envpool`: Atari and MuJoCo environments stepped by EnvPool's C++ pool.

Each worker owns one pool of its `num_envs` environments, stepped synchronously (batch = all of
them) on one C++ thread, so a worker stays one core's work as with the Gymnasium path. The pool
is offered only where it can stand in for the Gymnasium path rlpar uses otherwise:

- Atari (ale-py ids with `env.atari`): EnvPool preprocesses as Gymnasium's AtariPreprocessing +
  FrameStackObservation do (1..noop_max single-frame no-ops, frame skip max-pooling the last two
  frames, ALE's grayscale palette, INTER_AREA resize, the stack filled with the reset frame);
  sticky actions, the action set, mode, difficulty and the frame limit come from the id's
  registered ale-py arguments and `env.kwargs`; no fire reset and raw rewards (the algorithm
  clips, `algo.reward_clip`). With the same emulator state the observations are bit-identical.
- MuJoCo (Gymnasium's `*-v4` and `*-v5` ids): EnvPool's own C++ port of the same task, with
  `env.kwargs` passed on where EnvPool has the option under the same name (`*_range` as
  `*_min`/`*_max`).

Both follow Gymnasium's next-step autoreset: the step after an episode ends returns the reset
observation with reward 0, ignores its action, and the rollout marks it invalid; a truncated
step returns the real final observation, for bootstrapping. Environment `j` of a pool is seeded
with the `j`-th seed passed to `reset`, as rlpar seeds environment `i` of the run with `seed + i`,
so a worker's environments do not depend on how the run is split.

Where it cannot match the Gymnasium path (docs: the EnvPool section):
- random streams: EnvPool draws no-ops, sticky actions and MuJoCo reset noise from its own C++
  generators, so the same seed gives other episodes than Gymnasium's (reproducible, and the same
  for environment i however environments are split over workers, but not the same batches);
- EnvPool's seeds are fixed when a pool is built: `reset(seed=...)` builds a new pool;
- Atari time limit: EnvPool counts agent steps (27,000 for v5), ale-py emulator frames including
  the reset no-ops (108,000), so an episode that long ends a few steps later;
- `terminal_on_life_loss`: after a life lost EnvPool takes 1..noop_max single-frame no-ops and
  keeps the frame stack; rlpar's EpisodicLife takes one no-op agent step and refills the stack;
- MuJoCo: EnvPool's port, on its own MuJoCo build: Hopper, Walker2d and Swimmer agree with
  Gymnasium's to about 1e-12 from the same state, HalfCheetah to rounding that then grows, Ant
  differs by about 1e-7 at its first step (contacts);
- a step that ends the episode at the time limit is reported truncated only, never also
  terminated (Gymnasium's may be both), so it is bootstrapped;
- no environment rebuilds (RecoveringEnv): an error inside the pool fails its worker;
- resume (`parallel=local` checkpoints pickle environments): the pool's state cannot be saved,
  so a restored pool starts fresh episodes; the interrupted ones end truncated at their last
  observation (bootstrapped, flagged `episode_cut` in the step's info so that the rollout leaves
  them out of the return statistics: they did not finish), and an environment whose episode had
  just ended records one zero-reward step.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np

from rlpar.envs.atari import atari_options, is_ale_id

ENVPOOL_PIN = "envpool==1.2.5"
MUJOCO_ENTRY_POINT = "gymnasium.envs.mujoco."
MAX_SEED = 2**31  # EnvPool's seeds are int32: larger ones are taken modulo
NO_LIMIT = 10**9  # EnvPool needs an episode limit; ale-py ids without one get this many agent steps
RESUME_SEED_STRIDE = 1_000_003  # a restored pool's seeds, clear of the run's own
EPISODE_CUT = "episode_cut"  # info key: per environment, a truncation that ends no episode of the statistics
# ale-py's AtariEnv arguments -> EnvPool's (game and frameskip are handled on their own)
ALE_OPTIONS = {
    "repeat_action_probability": "repeat_action_probability",
    "full_action_space": "full_action_space",
    "mode": "mode",
    "difficulty": "difficulty",
}
# EnvPool's pool and bookkeeping options, never taken from env.kwargs
RESERVED = {
    "num_envs",
    "batch_size",
    "num_threads",
    "max_num_players",
    "thread_affinity_offset",
    "base_path",
    "seed",
    "env_seed",
    "gym_reset_return_info",
    "max_episode_steps",
    "xml_file",
    "post_constraint",
    "frame_stack",
    "reward_threshold",
    "gymnasium_v5_render_camera",
    "legacy_healthy_reward",
}


def _envpool():
    import envpool

    return envpool


def envpool_problem(spec, make_env) -> str | None:
    """Why `spec` cannot run on EnvPool with the Gymnasium path's semantics, in one line, or None.
    Called after the id is known to exist (and `env.atari` to be valid); `make_env` builds the
    Gymnasium environment whose spaces EnvPool's must equal."""
    if spec.entry_point:
        return (
            f"env.vectorization: envpool builds registered Atari and MuJoCo ids, not env.entry_point "
            f"{spec.entry_point}; use auto or sync"
        )
    try:
        _envpool()
    except ImportError as err:
        return f"env.vectorization: envpool is not installed (pip install {ENVPOOL_PIN}; {err})"
    try:
        task_id, options = envpool_task(spec)
    except ValueError as err:
        return str(err)
    try:
        observation, action = envpool_spaces(task_id, options)
    except Exception as err:  # EnvPool's config checks: AssertionError, TypeError, RuntimeError
        from rlpar.errors import first_line

        return f"env.kwargs: EnvPool refuses {options} for {task_id} ({type(err).__name__}: {first_line(err)})"
    try:
        gym_env = make_env(spec)
    except Exception:  # the probe builds it again and names what fails
        return None
    try:
        if (observation, action) != (gym_env.observation_space, gym_env.action_space):
            return (
                f"env.vectorization: EnvPool's {task_id} has spaces {observation}, {action} but Gymnasium's "
                f"{spec.id} {gym_env.observation_space}, {gym_env.action_space} with these options; use auto"
            )
    finally:
        gym_env.close()
    return None


def envpool_task(spec) -> tuple[str, dict[str, Any]]:
    """EnvPool's task id for `spec` and the options that give it the Gymnasium path's semantics.
    ValueError (one line) where there are none."""
    ale = is_ale_id(spec.id)  # registers ale-py's ids in this process (a worker, a Ray actor) first
    registered = gym.registry.get(spec.id)
    available = set(_envpool().list_all_envs())
    if ale:
        return _atari_task(spec, registered, available)
    if registered is not None and str(registered.entry_point).startswith(MUJOCO_ENTRY_POINT) and spec.id in available:
        return spec.id, _mujoco_options(spec, _envpool().make_spec(spec.id).config._asdict())
    raise ValueError(
        f"env.vectorization: envpool covers ale-py ids with env.atari and Gymnasium's MuJoCo ids "
        f"(-v4, -v5); {spec.id} is neither here (use auto)"
    )


def _atari_task(spec, registered, available: set[str]) -> tuple[str, dict[str, Any]]:
    if spec.atari is None:
        raise ValueError(
            "env.vectorization: envpool always preprocesses Atari frames; env.atari=null (raw frames) "
            "needs auto or sync"
        )
    atari = atari_options(spec.atari)
    if not atari["grayscale"]:
        raise ValueError(
            "env.atari.grayscale: false stacks RGB frames differently in EnvPool (channels first) than "
            "Gymnasium's path; use true, or env.vectorization=auto"
        )
    if atari["noop_max"] < 1:
        raise ValueError(
            "env.atari.noop_max: EnvPool takes 1..noop_max no-ops after a reset and cannot take none; "
            "use 1 or more, or env.vectorization=auto"
        )
    ale_kwargs = {**registered.kwargs, **spec.kwargs}
    game = ale_kwargs.pop("game")
    task_id = "".join(part.capitalize() for part in game.split("_")) + "-v5"
    if task_id not in available:
        raise ValueError(f"env.id: EnvPool has no Atari game '{game}' ({spec.id}); use env.vectorization=auto")
    options = {
        "use_fire_reset": False,
        "reward_clip": False,
        "episodic_life": atari["terminal_on_life_loss"],
        "zero_discount_on_life_loss": False,
        "use_inter_area_resize": True,
        "gray_scale": True,
        "frame_skip": atari["frame_skip"],
        "noop_max": atari["noop_max"],
        "stack_num": atari["frame_stack"],
        "img_height": atari["screen_size"],
        "img_width": atari["screen_size"],
    }
    frame_limits = [ale_kwargs.pop("max_num_frames_per_episode", None), registered.max_episode_steps]
    ale_kwargs.pop("frameskip", None)  # env.atari skips frames (atari_problem refuses another env.kwargs.frameskip)
    if ale_kwargs.get("obs_type", "rgb") in ("rgb", "grayscale"):  # AtariPreprocessing reads the screen itself
        ale_kwargs.pop("obs_type", None)
    for key, value in ale_kwargs.items():
        if key not in ALE_OPTIONS:
            raise ValueError(
                f"env.kwargs.{key}: EnvPool has no equivalent for Atari; it takes "
                f"{', '.join(ALE_OPTIONS)} (or use env.vectorization=auto)"
            )
        options[ALE_OPTIONS[key]] = -1 if value is None else value
    limits = [limit // atari["frame_skip"] for limit in frame_limits if limit] + [spec.max_episode_steps or NO_LIMIT]
    options["max_episode_steps"] = min(limits)
    return task_id, options


def _mujoco_options(spec, config: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in spec.kwargs.items():
        if key in config and key not in RESERVED:
            options[key] = value
        elif key.endswith("_range") and isinstance(value, (list, tuple)) and len(value) == 2:
            base = key[: -len("_range")]
            for end, suffix in zip(value, ("_min", "_max")):
                if base + suffix in config:
                    options[base + suffix] = float(end)
                elif math.isfinite(end):
                    raise ValueError(
                        f"env.kwargs.{key}: EnvPool's {spec.id} has no {base}{suffix}; use env.vectorization=auto"
                    )
        else:
            takes = sorted(k for k in config if k not in RESERVED)
            raise ValueError(
                f"env.kwargs.{key}: EnvPool's {spec.id} has no equivalent; it takes {', '.join(takes)} "
                f"(or use env.vectorization=auto)"
            )
    if spec.max_episode_steps:
        options["max_episode_steps"] = spec.max_episode_steps
    return options


def envpool_spaces(task_id: str, options: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """One environment's spaces as Gymnasium declares them: EnvPool's, with Box actions float32
    (Gymnasium's MuJoCo tasks; EnvPool declares float64 and converts what it is given)."""
    try:
        return _spaces(task_id, tuple(sorted(options.items())))
    except TypeError:  # an unhashable option value (a list): not cached
        return _spaces.__wrapped__(task_id, tuple(sorted(options.items())))


@functools.lru_cache(maxsize=16)  # EnvPool's spec loads the game's ROM or the robot's model
def _spaces(task_id: str, options: tuple) -> tuple[gym.Space, gym.Space]:
    pool_spec = _envpool().make_spec(task_id, **dict(options))
    observation, action = pool_spec.gymnasium_observation_space, pool_spec.gymnasium_action_space
    if isinstance(action, gym.spaces.Box):
        action = gym.spaces.Box(action.low.astype(np.float32), action.high.astype(np.float32), action.shape, np.float32)
    return observation, action


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """A Gymnasium VectorEnv over one synchronous EnvPool; the pool is built by `reset`, whose
    seeds EnvPool fixes at construction."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, *, task_id: str, options: dict[str, Any], num_envs: int, num_threads: int = 1):
        self.task_id, self.options, self.num_envs, self.num_threads = task_id, dict(options), num_envs, num_threads
        self.single_observation_space, self.single_action_space = envpool_spaces(task_id, options)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.pool: Any = None  # EnvPool's pool (an untyped package), built by _build
        self.seeds: list[int] = []
        self.last_obs = None
        self.resume_steps = 0  # after unpickling: the truncating step, then the reset step (__setstate__)
        self.fresh_obs = None

    def _build(self, seeds: list[int]):
        if self.pool is not None:
            self.pool.close()
        self.seeds = [int(s) % MAX_SEED for s in seeds]
        self.pool = _envpool().make(
            self.task_id,
            env_type="gymnasium",
            num_envs=self.num_envs,
            batch_size=self.num_envs,
            num_threads=self.num_threads,
            env_seed=self.seeds,
            **self.options,
        )
        obs, info = self.pool.reset()
        return obs, info

    def reset(self, *, seed=None, options=None):
        """`seed`: one seed per environment, or one seed s for s, s + 1, ...; None: fresh ones
        (or, once built, the same pool's environments reset)."""
        if seed is None and self.pool is not None:
            obs, info = self.pool.reset()
        else:
            if seed is None:
                seeds = np.random.SeedSequence().generate_state(self.num_envs).tolist()
            elif isinstance(seed, (list, tuple, np.ndarray)):
                seeds = list(seed)
            else:
                seeds = [int(seed) + j for j in range(self.num_envs)]
            obs, info = self._build(seeds)
        self.last_obs, self.resume_steps = obs, 0
        return obs, info

    def step(self, actions):
        if self.resume_steps:
            return self._resume_step()
        obs, rewards, terminated, truncated, info = self.pool.step(np.asarray(actions))
        self.last_obs = obs
        return obs, rewards.astype(np.float64), terminated, truncated, info

    def _resume_step(self):
        """A restored pool's first two steps: the interrupted episodes end truncated at their last
        observation (cut short, not finished: `episode_cut`), then a reset step into the fresh
        pool's episodes."""
        zeros, flags = np.zeros(self.num_envs), np.zeros(self.num_envs, bool)
        self.resume_steps -= 1
        if self.resume_steps:
            return self.last_obs, zeros, flags, ~flags, {EPISODE_CUT: ~flags}
        self.last_obs = self.fresh_obs
        self.fresh_obs = None
        return self.last_obs, zeros, flags, flags.copy(), {}

    def close(self, **kwargs):
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def __getstate__(self):
        """What a checkpoint can keep: how to build the pool, its seeds, the last observation."""
        return {
            "task_id": self.task_id,
            "options": self.options,
            "num_envs": self.num_envs,
            "num_threads": self.num_threads,
            "seeds": self.seeds,
            "last_obs": self.last_obs,
        }

    def __setstate__(self, state):
        self.__init__(
            task_id=state["task_id"],
            options=state["options"],
            num_envs=state["num_envs"],
            num_threads=state["num_threads"],
        )
        self.fresh_obs, _ = self._build([s + RESUME_SEED_STRIDE for s in state["seeds"]])
        self.last_obs, self.resume_steps = state["last_obs"], 2


def make_envpool_vector_env(spec, num_envs: int) -> EnvPoolVectorEnv:
    task_id, options = envpool_task(spec)
    return EnvPoolVectorEnv(task_id=task_id, options=options, num_envs=num_envs)
