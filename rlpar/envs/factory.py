"""Build single and vectorised environments from a small, picklable description.

The same `EnvSpec` travels to subprocesses and Ray actors, so every sampler builds its
environments the same way and seeds environment `i` of the whole run with `seed + i`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any, cast

import gymnasium as gym

from rlpar.envs.atari import atari_problem, ensure_registered, is_ale_id, make_atari_kwargs, wrap_ale
from rlpar.envs.envpool_vector import envpool_problem, make_envpool_vector_env
from rlpar.envs.old_gym import OldGymAdapter, looks_like_old_gym
from rlpar.envs.recovering import RecoveringEnv
from rlpar.envs.registration import UnknownEnvId, register_env_id, split_module_id
from rlpar.envs.seeded_vector import SEEDED_NATIVE
from rlpar.envs.wrapping import ActionMaskFromInfo, apply_wrappers, wrapper_problems

VECTORIZATION_MODES = ("auto", "native", "sync", "envpool")  # envpool: rlpar/envs/envpool_vector.py
ENV_KINDS = ("gymnasium", "pettingzoo")  # env.kind: single-agent Gymnasium, or multi-agent PettingZoo
API_MODES = ("auto", "gymnasium", "old_gym")


@dataclass(frozen=True)
class EnvSpec:
    """What to build: a registered id or a class by import path, plus how to vectorise it."""

    id: str | None = None
    entry_point: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    api: str = "auto"
    vectorization: str = "auto"
    max_episode_steps: int | None = None
    atari: dict[str, Any] | None = None  # Atari preprocessing for ale-py ids (rlpar/envs/atari.py)
    # An environment rebuilt more often than this within the window stops the run (recovering.py).
    max_restarts: int = 100
    restart_window_s: float = 60.0
    # Where `entry_point`'s module is looked for too, in every process that builds the env (worker
    # subprocesses, Ray actors): the directory rlpar was started in (resolve_env_spec sets it).
    import_dir: str | None = None
    # env=pettingzoo (rlpar/envs/pettingzoo.py): `id` names a PettingZoo module, `entry_point` a
    # function or class returning a Parallel or AEC env; agents map to `policies`, rows take the
    # one-hot `agent_id`, and a centralised critic's rows the `global_state` (None: no state).
    kind: str = "gymnasium"
    policies: Any = "auto"
    agent_id: bool = False
    global_state: str | None = None
    # A turn-based PettingZoo game (rlpar.envs.pettingzoo.TurnBasedGame): who plays the other seats,
    # and with `pool` the pool's keys (rlpar.selfplay.pool.OpponentPoolConfig; the trainer holds the pool).
    opponent: str = "pool"
    opponent_pool: dict[str, Any] = field(default_factory=dict)
    # Modules imported before the environment is built, in every process that builds it: packages
    # that register their ids on import (rlpar/envs/registration.py finds the usual ones itself).
    imports: tuple[str, ...] = ()
    # Gymnasium wrappers around each environment, innermost first: import paths, or mappings of a
    # `_target_` and its keyword arguments (rlpar/envs/wrapping.py).
    wrappers: tuple[Any, ...] = ()
    # The `info` key where the environment gives its action mask (None: none there), moved into the
    # observation outside `wrappers` (rlpar/envs/wrapping.py ActionMaskFromInfo).
    action_mask_info_key: str | None = None


def resolve_env_spec(*, centralised_critic: bool = False, skip_turn_based: bool = False, **env_cfg) -> EnvSpec:
    """Turn the `env` config group into an EnvSpec (keys that are not EnvSpec fields are ignored).
    A multi-agent environment's rows carry the global state only for a `centralised_critic`; a
    turn-based PettingZoo game becomes a single-agent TurnBasedGame (unless `skip_turn_based`)."""
    names = {f.name for f in fields(EnvSpec)}
    spec = {k: v for k, v in env_cfg.items() if k in names}
    if not centralised_critic:
        spec["global_state"] = None
    spec["kwargs"] = dict(spec.get("kwargs") or {})
    spec["opponent_pool"] = dict(spec.get("opponent_pool") or {})
    if isinstance(spec.get("atari"), Mapping):
        spec["atari"] = dict(spec["atari"])
    if isinstance(spec.get("policies"), Mapping):
        spec["policies"] = {
            name: list(agents) if isinstance(agents, (list, tuple)) else agents
            for name, agents in spec["policies"].items()
        }
    module, spec["id"] = split_module_id(spec["id"]) if isinstance(spec.get("id"), str) else (None, spec.get("id"))
    spec["imports"] = tuple(spec.get("imports") or ()) + ((module,) if module else ())
    spec["wrappers"] = tuple(dict(w) if isinstance(w, Mapping) else w for w in spec.get("wrappers") or ())
    if (spec.get("entry_point") or spec["imports"] or spec["wrappers"]) and not spec.get("import_dir"):
        spec["import_dir"] = launch_dir()
    resolved = EnvSpec(**spec)
    return turn_based_spec(resolved) if not skip_turn_based and turn_based_game(resolved) else resolved


TURN_BASED_ENTRY_POINT = "rlpar.envs.factory:make_turn_based_game"


def turn_based_game(spec: EnvSpec) -> bool:
    """An `env=pettingzoo` spec naming a game whose agents act in turn (an AEC env that is not
    parallelizable: PettingZoo's classic games), which is played as a single-agent env. False
    where the game cannot be built (the probe then names why)."""
    if spec.kind != "pettingzoo":
        return False
    try:
        from rlpar.envs.pettingzoo import is_turn_based

        env = _game_factory(spec.entry_point or spec.id, bool(spec.entry_point), spec.import_dir)(**spec.kwargs)
    except Exception:  # a user's game may raise anything; the multi-agent probe reports it
        return False
    try:
        return is_turn_based(env)
    finally:
        env.close()


def _game_factory(game: str | None, is_entry_point: bool, import_dir: str | None):
    """What builds a PettingZoo game: its entry point, or its module's `parallel_env` or `env`."""
    from rlpar.envs.pettingzoo import module_env_factory

    if not game:
        raise ValueError("env: give env.id (a PettingZoo module) or env.entry_point")
    return import_object(game, import_dir) if is_entry_point else module_env_factory(game)


def make_turn_based_game(
    game: str,
    game_kwargs: dict | None = None,
    opponent: str = "pool",
    game_is_entry_point: bool = False,
    import_dir: str | None = None,
    render_mode: str | None = None,
) -> gym.Env:
    """A turn-based PettingZoo game as a single-agent env (rlpar.envs.pettingzoo.TurnBasedGame):
    `game` names a PettingZoo module, or with `game_is_entry_point` a function or class;
    `render_mode` (an evaluation's video) is the game's."""
    from rlpar.envs.pettingzoo import TurnBasedGame

    kwargs = {**(game_kwargs or {}), **({"render_mode": render_mode} if render_mode else {})}
    aec_env = _game_factory(game, game_is_entry_point, import_dir)(**kwargs)
    return TurnBasedGame(aec_env, opponent=opponent, name=game)


def turn_based_spec(spec: EnvSpec) -> EnvSpec:
    """A turn-based game's spec as a single-agent env: TurnBasedGame with the game, its kwargs
    and `env.opponent`."""
    game = spec.entry_point or spec.id
    return EnvSpec(
        id=spec.id or spec.entry_point,
        entry_point=TURN_BASED_ENTRY_POINT,
        kwargs={
            "game": game,
            "game_kwargs": dict(spec.kwargs),
            "opponent": spec.opponent,
            "game_is_entry_point": bool(spec.entry_point),
            "import_dir": spec.import_dir,
        },
        vectorization="sync",
        max_episode_steps=spec.max_episode_steps,
        max_restarts=spec.max_restarts,
        restart_window_s=spec.restart_window_s,
        import_dir=spec.import_dir,
        imports=spec.imports,
        opponent=spec.opponent,
        opponent_pool=dict(spec.opponent_pool),
    )


LAUNCH_DIR_VARIABLE = "RLPAR_LAUNCH_DIR"  # set by `rlpar train` / main.py; inherited by its workers


def launch_dir() -> str:
    """The directory rlpar was started in (a Tune trial or a Ray task runs elsewhere)."""
    return os.environ.get(LAUNCH_DIR_VARIABLE) or os.getcwd()


def add_import_dir(directory: str | None) -> None:
    """Let modules in `directory` be imported, after installed packages (so a user's `logging.py`
    there shadows nothing)."""
    if directory and directory not in sys.path:
        sys.path.append(directory)


def split_import_path(path: str) -> tuple[str, str]:
    """`package.module:Name` or `package.module.Name` -> (module, name)."""
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if not module_name or not attr:
        raise ImportError(f"'{path}' is not an import path like 'package.module:ClassName'")
    return module_name, attr


def user_module_path(path: str, search_dir: str | None = None) -> str | None:
    """The file (a module) or directory (a package) that holds the top-level module of import
    path `path`, when it is a user's own code: None for installed packages, the standard library,
    rlpar itself, and what cannot be found (validation names that)."""
    import importlib.util
    import sysconfig

    add_import_dir(search_dir)
    try:
        spec = importlib.util.find_spec(split_import_path(path)[0].split(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        return None
    where = spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin
    where = os.path.realpath(where)
    installed = {
        os.path.realpath(p)
        for key in ("purelib", "platlib", "stdlib", "platstdlib")
        if (p := sysconfig.get_paths().get(key))
    }
    rlpar_dir = os.path.realpath(os.path.dirname(os.path.dirname(__file__)))
    if where == rlpar_dir or any(where == d or where.startswith(d + os.sep) for d in installed):
        return None
    return where


def import_object(path: str, search_dir: str | None = None):
    """Import `package.module:Name` or `package.module.Name`, also from `search_dir` (a user's
    `my_env.py` in the directory rlpar was started in; searched after installed packages)."""
    add_import_dir(search_dir)
    module_name, attr = split_import_path(path)
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as err:
        raise ImportError(f"module '{module_name}' has no attribute '{attr}'") from err


def prepare_env(spec: EnvSpec) -> None:
    """Import `env.imports` and what registers `env.id` (rlpar/envs/registration.py), in the
    process about to build the environment: ImportError or UnknownEnvId when that fails."""
    if spec.imports:
        add_import_dir(spec.import_dir)
        for module in spec.imports:
            importlib.import_module(module)
    if spec.id and spec.kind == "gymnasium" and not spec.entry_point:
        if problem := ensure_registered(spec.id):  # ale-py's ids, old and new (rlpar/envs/atari.py)
            raise UnknownEnvId(problem)
        register_env_id(spec.id)


def env_imports_problem(spec: EnvSpec) -> str | None:
    """One line when a module of `env.imports` cannot be imported, or the id is still unknown."""
    from rlpar.errors import first_line

    for module in spec.imports:  # env.imports, then the module of env.id=module:Env-v0
        try:
            add_import_dir(spec.import_dir)
            importlib.import_module(module)
        except Exception as err:  # a user's module may raise anything on import
            return f"env.imports: cannot import '{module}' ({type(err).__name__}: {first_line(err)})"
    try:
        prepare_env(spec)
    except UnknownEnvId as err:
        return str(err)
    except Exception as err:  # a package that registers ids failed on import
        return f"env.id: importing what registers '{spec.id}' failed ({type(err).__name__}: {first_line(err)})"
    return None


# Gymnasium environments whose simulator is an optional package: (the entry point's module prefix,
# the simulator, the module to import, requirements.txt's pin). Gymnasium's own hint (`pip install
# "gymnasium[mujoco]"`, "swig" for Box2D) installs other versions than the ones rlpar is tested with.
SIMULATOR_PACKAGES = (
    ("gymnasium.envs.mujoco.", "MuJoCo", "mujoco", "mujoco==4.0.0"),
    ("gymnasium.envs.box2d.", "Box2D", "Box2D", "box2d==2.3.10"),
)


def missing_simulator(env_id: str, entry_point) -> str | None:
    """One line naming the package to install when `env_id`'s simulator (MuJoCo, Box2D) cannot be
    imported, else None. Checked before an environment is built: Gymnasium would raise
    DependencyNotInstalled from deep inside `gym.make`, in every worker."""
    if not isinstance(entry_point, str):
        return None
    for prefix, simulator, module, pin in SIMULATOR_PACKAGES:
        if entry_point.startswith(prefix):
            try:
                importlib.import_module(module)
            except ImportError as err:
                from rlpar.errors import first_line

                return (
                    f"env.id: '{env_id}' needs {simulator}, which is not installed "
                    f"(pip install {pin}; {type(err).__name__}: {first_line(err)})"
                )
    return None


def check_env_exists(spec: EnvSpec) -> str | None:
    """Return a one-line problem description, or None when the environment can be built."""
    if spec.kind == "pettingzoo":
        if spec.wrappers:
            return "env.wrappers: Gymnasium wrappers are for single-agent environments; env=pettingzoo takes none"
        return None  # its module or function is imported by the probe, which names what fails
    if problem := env_imports_problem(spec):
        return problem
    if problem := wrappers_problem(spec):
        return problem
    if spec.entry_point and spec.vectorization == "envpool":
        return envpool_problem(spec, make_env)
    if spec.entry_point:
        try:
            import_object(spec.entry_point, spec.import_dir)
        except Exception as err:  # import errors of user code take many forms
            return f"env.entry_point: cannot import '{spec.entry_point}' ({err})"
        return None
    if not spec.id:
        return "env: give either env.id (a registered Gymnasium id) or env.entry_point (a class)"
    problem = ensure_registered(spec.id)
    if problem:
        return problem
    try:
        registered = gym.spec(spec.id)
    except gym.error.Error as err:
        from rlpar.errors import first_line

        return f"env.id: '{spec.id}' is not a registered Gymnasium environment ({first_line(err)})"
    if problem := missing_simulator(spec.id, registered.entry_point):
        return problem
    if is_ale_id(spec.id) and spec.vectorization == "native":
        return (
            "env.vectorization: native is not offered for ale-py ids (ale-py's AtariVectorEnv preprocesses "
            "on its own terms, unlike env.atari); use auto or sync"
        )
    if spec.atari is not None and (problem := atari_problem(spec)):
        return problem
    return envpool_problem(spec, make_env) if spec.vectorization == "envpool" else None


def make_env(spec: EnvSpec) -> gym.Env:
    """One Gymnasium environment, adapted from the old gym API when needed (a multi-agent one as
    its team: rlpar.envs.pettingzoo.TeamEnv)."""
    if spec.kind == "pettingzoo":
        from rlpar.envs.pettingzoo import TeamEnv

        return TeamEnv(multi_agent_vector_env(spec))
    prepare_env(spec)
    env = _make_unwrapped_env(spec)
    if spec.wrappers:
        env = apply_wrappers(env, spec.wrappers, partial(import_object, search_dir=spec.import_dir))
    return ActionMaskFromInfo(env, spec.action_mask_info_key) if spec.action_mask_info_key else env


def wrappers_problem(spec: EnvSpec) -> str | None:
    """`env.wrappers` that cannot be imported or are no Gymnasium wrappers, one line each; a
    vector env built whole (native, envpool) takes none."""
    problems = wrapper_problems(spec.wrappers, partial(import_object, search_dir=spec.import_dir))
    if spec.wrappers and spec.vectorization in ("native", "envpool"):
        problems.append(
            f"env.vectorization: {spec.vectorization} vector envs are built whole, without env.wrappers; "
            f"use auto or sync"
        )
    elif spec.action_mask_info_key and spec.vectorization in ("native", "envpool"):
        problems.append(
            f"env.vectorization: {spec.vectorization} vector envs are built whole, without the wrapper that "
            f"moves env.action_mask_info_key's mask into the observation; use auto or sync"
        )
    return "; ".join(problems) or None


def _make_unwrapped_env(spec: EnvSpec) -> gym.Env:
    if spec.entry_point:
        env_cls = import_object(spec.entry_point, spec.import_dir)
        env = env_cls(**spec.kwargs)
        env = _adapt_api(env, spec.api)
        if spec.max_episode_steps:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=spec.max_episode_steps)
        return env
    assert spec.id is not None  # a spec names an entry point (above) or a registered id
    extra = {"max_episode_steps": spec.max_episode_steps} if spec.max_episode_steps else {}
    if is_ale_id(spec.id):  # registers ale-py's ids in this process (a worker, a Ray actor) first
        if spec.atari is None:
            return wrap_ale(gym.make(spec.id, disable_env_checker=True, **extra, **spec.kwargs), None)
        env = gym.make(spec.id, disable_env_checker=True, **make_atari_kwargs(spec))
        return wrap_ale(env, spec.atari, max_episode_steps=spec.max_episode_steps)  # limit in agent steps
    env = gym.make(spec.id, disable_env_checker=True, **extra, **spec.kwargs)
    return _adapt_api(env, spec.api) if spec.api == "old_gym" else env


def _adapt_api(env, api: str):
    if api == "gymnasium":
        return env
    if api == "old_gym" or (not isinstance(env, gym.Env) and looks_like_old_gym(env)):
        return OldGymAdapter(env)
    return env


def _has_seeded_native(spec: EnvSpec) -> bool:
    """rlpar's own per-environment-seeded vector env exists for it (seeded_vector.py)."""
    return spec.id in SEEDED_NATIVE and not spec.kwargs


def has_native_vector_env(spec: EnvSpec) -> bool:
    if spec.kind == "pettingzoo" or spec.wrappers or spec.action_mask_info_key:
        return False
    prepare_env(spec)
    if spec.entry_point or spec.api == "old_gym" or is_ale_id(spec.id):
        return False  # ale-py's AtariVectorEnv preprocesses differently from make_env
    assert spec.id is not None  # no entry point: a registered id
    return _has_seeded_native(spec) or gym.spec(spec.id).vector_entry_point is not None


def make_vector_env(spec: EnvSpec, num_envs: int) -> gym.vector.VectorEnv:
    """A vector env of `num_envs` copies; the caller resets it with `env_seeds(...)`.

    `native` prefers rlpar's per-environment-seeded numpy envs (seeded_vector.py), which keep
    batches identical however environments are split over workers; Gymnasium's own native
    envs share one generator and are reproducible only for a fixed split.

    `envpool` steps Atari and MuJoCo ids in one EnvPool per worker (envpool_vector.py, where
    its semantics differ from the Gymnasium path's).

    All use Gymnasium's next-step autoreset: the step after an episode ends is a reset step
    whose action is ignored (the rollout marks it invalid). Environments stepped one
    by one (`sync`, and multi-agent ones) are rebuilt when they raise (recovering.py); an exception inside a native
    vector env or an EnvPool fails its worker, which the multiprocess and Ray samplers replace.
    Environments that fail for good, or return what their spaces do not declare, stop the run
    (EnvironmentFailedError) on every sampler.
    """
    if spec.kind == "pettingzoo":
        return multi_agent_vector_env(spec, num_envs)
    prepare_env(spec)
    if vector_mode(spec) == "envpool":
        return make_envpool_vector_env(spec, num_envs)
    if vector_mode(spec) == "native":
        env_id = cast(str, spec.id)  # a registered id (None, with an entry point: gym.make_vec refuses it)
        if _has_seeded_native(spec):
            env_cls, limit = SEEDED_NATIVE[env_id]
            return env_cls(num_envs=num_envs, max_episode_steps=spec.max_episode_steps or limit)
        extra: dict[str, Any] = {"max_episode_steps": spec.max_episode_steps} if spec.max_episode_steps else {}
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **extra, **spec.kwargs)
    build = partial(make_env, spec)
    limits = _restart_limits(spec)
    return gym.vector.SyncVectorEnv([lambda: RecoveringEnv(build(), build, **limits) for _ in range(num_envs)])


def _restart_limits(spec: EnvSpec) -> dict:
    """How an environment that raises is rebuilt (recovering.py), single- and multi-agent alike."""
    return dict(
        name=spec.id or spec.entry_point, max_restarts=spec.max_restarts, restart_window_s=spec.restart_window_s
    )


def make_parallel_env(spec: EnvSpec):
    """One PettingZoo Parallel API environment of an `env=pettingzoo` spec, its agents' masks moved
    from their infos into their observations with `env.action_mask_info_key`."""
    from rlpar.envs.pettingzoo import AgentMasksFromInfo, as_parallel_env, module_env_factory

    try:
        import pettingzoo  # noqa: F401
    except ImportError:
        raise ImportError(
            "env=pettingzoo needs PettingZoo (pip install 'rlpar[multiagent]', or requirements.txt)"
        ) from None
    if spec.entry_point:
        make = import_object(spec.entry_point, spec.import_dir)
    else:
        assert spec.id is not None  # a spec names an entry point or an id
        make = module_env_factory(spec.id)
    env = as_parallel_env(make(**spec.kwargs))
    return AgentMasksFromInfo(env, spec.action_mask_info_key) if spec.action_mask_info_key else env


def multi_agent_vector_env(spec: EnvSpec, num_columns: int | None = None):
    """`num_columns` agent columns: whole environments of every agent (rlpar/envs/pettingzoo.py);
    None: one environment."""
    from rlpar.envs.pettingzoo import MultiAgentVectorEnv

    return MultiAgentVectorEnv(
        make=partial(make_parallel_env, spec),
        num_columns=num_columns,
        policies=spec.policies,
        agent_id=spec.agent_id,
        global_state=spec.global_state,
        **_restart_limits(spec),
    )


def env_restarts(venv: gym.vector.VectorEnv) -> int:
    """Rebuilds so far of the environments inside `venv` (0 for native vector envs); a multi-agent
    one counts its own."""
    return getattr(venv, "restarts", 0) + sum(getattr(env, "restarts", 0) for env in getattr(venv, "envs", ()))


def vector_mode(spec: EnvSpec) -> str:
    if spec.vectorization != "auto":
        return spec.vectorization
    return "native" if has_native_vector_env(spec) else "sync"


def env_seeds(spec: EnvSpec, num_envs: int, first_seed: int):
    """Seed argument for `reset`: one seed per environment, or one for a shared-RNG native env."""
    seeds = [int(first_seed) + i for i in range(num_envs)]
    shared_rng = vector_mode(spec) == "native" and not _has_seeded_native(spec)
    return seeds[0] if shared_rng else seeds
