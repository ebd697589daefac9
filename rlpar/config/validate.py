"""Validate the whole composed config up front and report every problem in one message.

Orchestration only: the class each `_target_` names (algorithm, sampler, model, replay, search,
checkpointer) is imported and asked. Its typed config (rlpar.typed_config) gives each key's type
and range, its class attributes what it supports, and its `config_problems` classmethod (on the
class or its config) its own rules. Nothing here names a component class or its keys.
"""

from __future__ import annotations

from functools import cached_property, partial
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlpar.errors import first_line, positive_integers, shown
from rlpar.typed_config import Check, accepted_keys, capabilities, checks, config_class

# Seeds reach numpy, torch, Gymnasium and simulators, some of which take 32-bit signed seeds;
# environment i of worker replacement g is seeded seed + i + 1,000,003 g.
MAX_SEED = 2**31 - 1
MAX_EVAL_EPISODES = 100_000
MAX_ID_CHARS = 256  # env.id and env.entry_point: a Gymnasium id or an import path
# One worker steps its environments in one process, as one numpy vector env at best; beyond this
# its start-up alone takes minutes (about 100 us an environment) while more workers would share it.
MAX_ENVS_PER_WORKER = 65_536


class ConfigError(Exception):
    """Every problem found in a config, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class ConfigView:
    """The config as components read it in their `config_problems(config)`: values as plain
    Python (`get`), range and choice checks that record their own problems (`number`, `choice`),
    and the other components' declarations (`algorithm`, `sampler`)."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.problems: list[str] = []
        self.unresolved: set[str] = set()
        self.sizes_refused = False  # the worker count is refused already: no second line about memory

    def get(self, key: str):
        """The value as plain Python; None, with the problem noted, when an interpolation fails."""
        try:
            value = OmegaConf.select(self.cfg, key, default=None, throw_on_missing=False)
            return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except OmegaConfBaseException as err:
            self.unresolved.add(key)
            self.problems.append(f"{key}: cannot be resolved ({first_line(err)})")
            return None

    def number(
        self,
        key: str,
        *,
        integer=False,
        low=None,
        high=None,
        low_open=False,
        high_open=False,
        optional=False,
        infinite_ok=False,
    ):
        """The value where it is a number (out of range or not), with a problem recorded where it
        is not one or out of range. NaN is never a number here (every comparison with it is false,
        so no range would catch it); infinity only with `infinite_ok`."""
        check = Check("integer" if integer else "number", low, high, low_open, high_open, optional, infinite_ok)
        return self.checked(key, check) if check.kind else None

    def checked(self, key: str, check: Check):
        """The value where it is of the kind `check` takes (rlpar.typed_config), with its
        problem recorded; None where it is not, or cannot be resolved."""
        value = self.get(key)
        if key in self.unresolved:
            return None
        if problem := check.problem(value):
            self.problems.append(f"{key}: {problem}")
        return value if value is not None and check.usable(value) else None

    def choice(self, key: str, options) -> None:
        value = self.get(key)
        if key not in self.unresolved and value not in options:
            self.problems.append(f"{key}: {shown(value)} is not one of {', '.join(map(str, options))}")

    def component(self, key: str):
        """The class `key` (a node's `_target_`) names, or None where it cannot be imported
        (reported by the check of unknown keys)."""
        from rlpar.config.known_keys import imported_class

        target = self.get(key)
        if not isinstance(target, str):
            return None
        try:
            return imported_class(target)
        except ImportError:
            return None

    @cached_property
    def sampler(self):
        return self.component("parallel._target_")

    @cached_property
    def algorithm(self) -> dict:
        """What algo._target_ declares as class attributes (`model_kind`, `central_inference`, ...);
        {} where it cannot be imported (reported by the check of unknown keys)."""
        algorithm = self.component("algo._target_")
        return capabilities(algorithm) if algorithm is not None else {}

    def algorithms_with(self, capability: str, value) -> str:
        """The algo group's options whose algorithm declares `capability` = `value` (or a tuple
        that holds it: `action_spaces`), those that learn this config's kind of environment (single-
        or multi-agent) and run on its sampler (`needs_ray`) where there are any, as a list in words."""
        from rlpar.config.known_keys import algorithm_options

        multi_agent = self.get("env.kind") == "pettingzoo"
        names = [
            name
            for name, declared in algorithm_options().items()
            if declared.get(capability) == value
            or isinstance(declared.get(capability), tuple)
            and value in declared[capability]
        ]
        names = [name for name in names if bool(algorithm_options()[name].get("multi_agent")) == multi_agent] or names
        if self.sampler is not None and not self.sampler.uses_ray:  # not those this sampler would refuse (apex_sac)
            names = [name for name in names if not algorithm_options()[name].get("needs_ray")] or names
        return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)

    def resolved(self) -> dict:
        config = cast(dict, OmegaConf.to_container(self.cfg, resolve=True))
        config.pop("hydra", None)
        return config

    def ask(self, component, method: str = "config_problems", *args) -> None:
        """A component's own rules: what it returns joins what its checks recorded."""
        rules = getattr(component, method, None)
        if rules is not None:
            self.problems.extend(rules(self, *args) or [])


def validate_config(cfg: DictConfig, *, check_env: bool = True):
    """Raise ConfigError listing every problem; when the config is usable, return the environment
    probe (rlpar.envs.probe.EnvProbe, for the build to reuse) or None without `check_env`.

    `check_env` builds one environment, resets and steps it, and estimates the run's memory."""
    c = ConfigView(cfg)
    _check_known_keys(c)
    _check_run_dir(c)
    c.number("seed", integer=True, low=0, high=MAX_SEED)
    c.number("eval_episodes", integer=True, low=0, high=MAX_EVAL_EPISODES)
    total_steps = c.number("total_steps", integer=True, low=1)
    c.number("time_limit_s", low=0, low_open=True, optional=True)
    workers = c.number("workers", integer=True, low=1)
    envs_per_worker = c.number("envs_per_worker", integer=True, low=1, high=MAX_ENVS_PER_WORKER)
    if (
        all(isinstance(n, int) and 1 <= n for n in (total_steps, workers, envs_per_worker))
        and envs_per_worker <= MAX_ENVS_PER_WORKER
        and workers * envs_per_worker > total_steps
    ):
        c.problems.append(
            f"envs_per_worker: {workers * envs_per_worker} environments (workers {workers} x envs_per_worker "
            f"{envs_per_worker}) is more than total_steps ({total_steps}): most would never take a step"
        )
    _check_learners(c, workers, envs_per_worker)
    _check_machine_limits(c, workers)
    _check_algo(c)
    _check_component(c, "model")
    probe = _check_env(c, check_env)
    _check_component(c, "parallel")
    if c.get("search"):
        _check_component(c, "search")
    c.number("ray.cpus_per_worker", low=0, low_open=True)
    c.number("ray.cpus_per_learner", low=0, low_open=True)
    c.number("ray.object_store_mb", integer=True, low=80)
    c.number("ray.num_cpus", integer=True, low=1, optional=True)  # Ray takes whole CPUs
    _check_hardware(c)
    _check_signing_key(c)
    _check_resume(c)
    c.choice("resume_envs", (True, False))
    if c.get("eval_stochastic") is not None:  # absent from the config.yaml of a run from before it existed
        c.choice("eval_stochastic", (True, False))
    if c.get("resume_trust") is not None:  # absent from the config.yaml of a run from before it existed
        c.choice("resume_trust", (True, False))
    c.number("checkpoint.every", integer=True, low=0)
    c.number("checkpoint.keep", integer=True, low=1)
    if c.problems:
        raise ConfigError(list(dict.fromkeys(c.problems)))  # an unresolved key is read more than once
    return probe


def _check_learners(c: ConfigView, workers, envs_per_worker) -> None:
    """learners=N: an algorithm that learns in one place, a sampler that can start the group,
    and an environment column for every learner."""
    learners = c.number("learners", integer=True, low=1)
    c.number("learner_group.timeout_s", low=0, low_open=True)
    c.number("learner_group.max_restarts", integer=True, low=0)
    if not isinstance(learners, int) or learners == 1:
        return
    if c.algorithm and not c.algorithm.get("data_parallel"):
        c.problems.append(
            f"learners: {c.get('algo.name')} {c.algorithm.get('not_data_parallel_because')}; "
            f"learners={learners} is for {c.algorithms_with('data_parallel', True)}"
        )
    if c.sampler is not None and not c.sampler.learner_groups:
        c.problems.append(
            f"learners: {learners} learners run as Ray actors: use parallel=distributed (a private Ray "
            f"instance on this machine, or a cluster); parallel={c.get('parallel.name')} learns in one process"
        )
    device = c.get("hardware.device")
    if isinstance(device, str) and device.startswith("cuda"):
        c.problems.append(
            f"learners: {learners} learners on hardware.device={device}: the group runs on CPUs (gloo) so "
            f"far; its GPU path (NCCL) is not built yet. Use learners=1 on the GPU, or hardware=cpu"
        )
    if c.get("model.recurrent") is not None:
        c.problems.append(
            f"learners: {learners} learners with model.recurrent={c.get('model.recurrent')}: a learner "
            f"group shares feed-forward policies only so far; use learners=1 for a recurrent policy"
        )
    if all(isinstance(n, int) for n in (workers, envs_per_worker)) and workers * envs_per_worker < learners:
        c.problems.append(
            f"learners: {learners} learners need at least one environment column each; there are "
            f"{workers * envs_per_worker} (workers x envs_per_worker)"
        )


def _check_algo(c: ConfigView) -> None:
    """The algorithm's keys as its typed config declares them, its own rules, and its replay (a
    component of its own); `rollout_length` is the sampler's."""
    c.number("algo.rollout_length", integer=True, low=1)
    _check_component(c, "algo")
    if "replay" in _algo_keys(c):
        _check_component(c, "algo.replay")


def _check_component(c: ConfigView, path: str) -> None:
    """The node at `path` against what its `_target_` declares: each key's type and range as the
    fields of its typed config give them (rlpar.typed_config), then the rules of its config and
    of the component itself (`config_problems`). A `_target_` that cannot be imported is named
    by the check of unknown keys."""
    component = c.component(f"{path}._target_")
    if component is None:
        return
    declared = config_class(component)
    if declared is not None:
        _check_fields(c, path, declared)
        if declared is not component:
            c.ask(declared)
    c.ask(component)


def _check_fields(c: ConfigView, path: str, declared: type) -> None:
    """The keys given at `path` against the fields of typed config `declared`: type and range."""
    node = OmegaConf.select(c.cfg, path, default=None, throw_on_missing=False)
    given = set(node.keys()) if isinstance(node, DictConfig) else set()
    for name, check in checks(declared).items():
        if name in given:
            c.checked(f"{path}.{name}", check)


def _algo_keys(c: ConfigView) -> frozenset[str]:
    """The keys algo._target_ takes; none where it cannot be imported (reported elsewhere)."""
    algorithm = c.component("algo._target_")
    return accepted_keys(algorithm) if algorithm is not None else frozenset()


def _central_inference(c: ConfigView) -> bool:
    """A server beside the learner acts for the workers' environments (local sampling acts in
    the learner's process anyway)."""
    return c.get("parallel.inference") == "central" and c.get("parallel.name") != "local"


def _check_env(c: ConfigView, check_env: bool):
    """The env group's keys and, with `check_env`, one environment probed; returns the probe."""
    from rlpar.envs.factory import (
        API_MODES,
        ENV_KINDS,
        VECTORIZATION_MODES,
        check_env_exists,
        resolve_env_spec,
        turn_based_spec,
    )
    from rlpar.envs.pettingzoo import OPPONENTS
    from rlpar.selfplay.pool import NODE as POOL_NODE
    from rlpar.selfplay.pool import OpponentPoolConfig

    pettingzoo = c.get("env.kind") == "pettingzoo"
    if "kind" in (c.get("env") or {}):
        c.choice("env.kind", ENV_KINDS)
    if pettingzoo:
        c.choice("env.agent_id", (True, False))
        if "opponent" in (c.get("env") or {}):
            c.choice("env.opponent", OPPONENTS)
        if c.get("env.opponent") == "pool":  # the pool's own keys, as the pool declares them
            _check_fields(c, POOL_NODE, OpponentPoolConfig)
            c.ask(OpponentPoolConfig)
    else:
        c.choice("env.vectorization", VECTORIZATION_MODES)
        c.choice("env.api", API_MODES)
    turn_based = pettingzoo and _turn_based(c)
    multi_agent = pettingzoo and not turn_based
    if turn_based and c.get("env.opponent") == "self" and _central_inference(c):
        c.problems.append(
            "env.opponent=self: the self opponent moves on the rollout workers, and parallel.inference=central "
            "leaves them without the policy (it would move at random); use parallel.inference=worker, or "
            "env.opponent=pool, whose snapshots act on the workers"
        )
    if turn_based and c.algorithm and c.algorithm.get("multi_agent"):
        c.problems.append(
            f"env=pettingzoo: {c.get('env.id') or c.get('env.entry_point')} is a turn-based game, played as a "
            "single-agent env against env.opponent; use a single-agent algorithm (algo=ppo, dqn, ...)"
        )
        check_env = False
    elif c.algorithm and bool(c.algorithm.get("multi_agent")) != multi_agent:
        algo = c.get("algo.name")
        c.problems.append(
            f"env=pettingzoo: algo={algo} learns single-agent environments; use "
            f"algo={c.algorithms_with('multi_agent', True)}"
            if multi_agent
            else f"algo={algo} learns multi-agent PettingZoo environments; use env=pettingzoo env.id=<module> "
            f"({c.get('env.id') or c.get('env.entry_point')} is a single-agent environment)"
        )
        check_env = False
    c.number("env.max_episode_steps", integer=True, low=1, optional=True)
    c.number("env.max_restarts", integer=True, low=0, optional=True)
    c.number(
        "env.restart_window_s", low=0, low_open=True, optional=True, infinite_ok=True
    )  # inf: never forgets a rebuild
    if not check_env:
        return None
    env_cfg = c.get("env")
    if "env" in c.unresolved:
        return None
    if not isinstance(env_cfg, dict):
        c.problems.append("env: missing" if env_cfg is None else f"env: expected a mapping, got {env_cfg!r}")
        return None
    shape_problems = _env_shape_problems(env_cfg)
    if shape_problems:
        c.problems.extend(shape_problems)
        return None
    # whether it is a turn-based game is known already (`_turn_based`): the game is not built again to tell
    spec = resolve_env_spec(
        **env_cfg, centralised_critic=bool(c.algorithm.get("centralised_critic")), skip_turn_based=True
    )
    if turn_based:
        if spec.action_mask_info_key:
            c.problems.append(
                "env.action_mask_info_key: a turn-based game's moves are masked by its seats' observations "
                "(`action_mask`, as in PettingZoo's classic games), not by infos; use env.action_mask_info_key=null"
            )
            return None
        spec = turn_based_spec(spec)
    problem = check_env_exists(spec)
    if problem:
        c.problems.append(problem)
        return None
    from rlpar.envs.probe import probe_env
    from rlpar.envs.spaces import ACTION_MASK_KEY

    model = c.get("model")
    mask_key = (model if isinstance(model, dict) else {}).get("action_mask_key", ACTION_MASK_KEY)
    if spec.action_mask_info_key and mask_key != ACTION_MASK_KEY:
        c.problems.append(
            f"model.action_mask_key: env.action_mask_info_key puts the mask from info under '{ACTION_MASK_KEY}' in "
            f"the observation, where the model must read it; leave model.action_mask_key={ACTION_MASK_KEY}, got "
            f"{shown(mask_key)}"
        )
        return None
    probe = probe_env(spec, mask_key=mask_key)
    problem = probe.problem or _spaces_problem(c, probe) or probe.step_problem
    if problem:
        c.problems.append(problem)
    return probe


def _turn_based(c: ConfigView) -> bool:
    """The env group names a turn-based PettingZoo game (rlpar.envs.factory.turn_based_game)."""
    from rlpar.envs.factory import resolve_env_spec, turn_based_game

    env_cfg = c.get("env")
    if "env" in c.unresolved or not isinstance(env_cfg, dict) or _env_shape_problems(env_cfg):
        return False
    try:
        return turn_based_game(resolve_env_spec(**{**env_cfg, "kind": "pettingzoo"}, skip_turn_based=True))
    except Exception:  # a malformed env group: reported by the checks that follow
        return False


def _spaces_problem(c: ConfigView, probe) -> str | None:
    """What the model refuses for these spaces, then whether the run fits in memory."""
    from rlpar.envs.factory import vector_mode

    model = c.component("model._target_")
    spaces_problem = getattr(model, "spaces_problem", None)
    return (spaces_problem(c, probe) if spaces_problem else None) or _memory_problem(
        c, probe.observation, probe.action.size, vector_mode(probe.spec)
    )


def _memory_problem(c: ConfigView, observation, action_size: int, vectorization: str) -> str | None:
    from rlpar.config.resources import estimated_memory_bytes, memory_problem

    numbers = [c.get(k) for k in ("workers", "envs_per_worker", "algo.rollout_length")]
    hidden = c.get("model.hidden_sizes")
    if not all(isinstance(n, int) and n >= 1 for n in numbers) or not positive_integers(hidden):
        return None  # reported on their own
    if c.sizes_refused:
        return None
    workers, envs_per_worker, rollout = numbers
    in_learner = c.sampler is not None and c.sampler.in_learner_process
    capacity = c.get("algo.replay.capacity") if "replay" in _algo_keys(c) else 0
    replay = c.component("algo.replay._target_") if isinstance(capacity, int) and capacity > 0 else None
    bytes_per_transition = getattr(replay, "bytes_per_transition", None)
    if bytes_per_transition is not None:  # the replay's layout: whole rows, or image stacks' frames once
        layout = {key: c.get(f"algo.replay.{key}") for key in ("frames", "frames_per_transition")}
        bytes_per_transition = partial(
            bytes_per_transition,
            image_shape=observation.image_shape,
            channels_last=observation.channels_last,
            **{key: value for key, value in layout.items() if value is not None},
        )
    processes, process_bytes = _worker_processes_here(c, workers)
    object_store = c.get("ray.object_store_mb") if processes and _worker_process_kind(c) == "ray" else 0
    estimate = estimated_memory_bytes(
        obs_dim=observation.obs_dim,
        obs_dtype=observation.obs_dtype,
        action_size=action_size,
        rollout_length=rollout,
        num_envs=workers * envs_per_worker,
        vectorization=vectorization,
        workers=0 if in_learner else workers,
        hidden_sizes=hidden,
        copies_of_batch=2 if in_learner else 3,
        replay_bytes=capacity * bytes_per_transition(observation.obs_dim, observation.obs_dtype)
        if bytes_per_transition
        else 0,
        worker_processes=processes,
        worker_process_bytes=process_bytes,
        object_store_bytes=object_store * 2**20 if isinstance(object_store, int) else 0,
    )
    return memory_problem(estimate)


def _worker_process_kind(c: ConfigView) -> str | None:
    """What the sampler says its workers are on this machine (multiprocess, ray or None)."""
    return c.sampler.worker_process_kind(c) if c.sampler is not None else None


def _worker_processes_here(c: ConfigView, workers) -> tuple[int, int]:
    from rlpar.config.resources import WORKER_PROCESS_BYTES

    kind = _worker_process_kind(c)
    if kind is None or not isinstance(workers, int) or workers < 1:
        return 0, 0
    return workers, WORKER_PROCESS_BYTES[kind]


def _check_machine_limits(c: ConfigView, workers) -> None:
    """Memory, processes and file descriptors of the worker processes, the first that does not fit
    named (the whole run's memory is estimated later, with the environment's spaces)."""
    from rlpar.config.resources import (
        FDS_BASE,
        FDS_PER_WORKER,
        GIB,
        RAY_DAEMONS,
        available_memory_bytes,
        file_descriptor_problem,
        process_problem,
    )

    processes, process_bytes = _worker_processes_here(c, workers)
    if not processes:
        return
    kind = _worker_process_kind(c)
    assert kind is not None  # processes here: the sampler named their kind
    needed, available = processes * process_bytes, available_memory_bytes()
    problem: str | None
    if needed > 0.9 * available:
        problem = (
            f"memory: they need about {needed / GIB:.1f} GiB ({process_bytes // 2**20} MiB each) but "
            f"{available / GIB:.1f} GiB is available"
        )
    else:
        problem = process_problem(processes + (RAY_DAEMONS if kind == "ray" else 0)) or file_descriptor_problem(
            FDS_BASE + FDS_PER_WORKER[kind] * processes
        )
    if problem:
        c.problems.append(
            f"workers: {workers} worker processes ({kind}) cannot run on this machine: {problem}; use fewer workers"
        )
        c.sizes_refused = True


def _env_shape_problems(env_cfg: dict) -> list[str]:
    """Wrong types that would make building the environment spec fail with a traceback."""
    problems = [
        f"env.{key}: expected a string, got {shown(env_cfg[key])}"
        for key in ("id", "entry_point")
        if env_cfg.get(key) is not None and not isinstance(env_cfg[key], str)
    ]
    problems += [
        f"env.{key}: {len(env_cfg[key])} characters long, more than the {MAX_ID_CHARS} an id or import path may have "
        f"({shown(env_cfg[key])})"
        for key in ("id", "entry_point")
        if isinstance(env_cfg.get(key), str) and len(env_cfg[key]) > MAX_ID_CHARS
    ]
    imports = env_cfg.get("imports")
    if imports is not None and not (isinstance(imports, list) and all(isinstance(m, str) and m for m in imports)):
        problems.append(f"env.imports: expected a list of module names such as [minigrid], got {shown(imports)}")
    wrappers = env_cfg.get("wrappers")
    if wrappers is not None and not isinstance(wrappers, list):
        problems.append(
            f"env.wrappers: expected a list such as [minigrid.wrappers.ImgObsWrapper], got {shown(wrappers)}"
        )
    elif wrappers:
        from rlpar.envs.wrapping import entry_shape_problem

        problems += list(filter(None, (entry_shape_problem(i, entry) for i, entry in enumerate(wrappers))))
    info_key = env_cfg.get("action_mask_info_key")
    if info_key is not None and not (isinstance(info_key, str) and info_key):
        problems.append(
            f"env.action_mask_info_key: expected an info key such as action_mask, or null, got {shown(info_key)}"
        )
    kwargs = env_cfg.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        problems.append(f"env.kwargs: expected a mapping such as {{render_mode: rgb_array}}, got {shown(kwargs)}")
    policies = env_cfg.get("policies")
    if isinstance(policies, dict):  # {policy: [agent names or patterns]}
        problems += [
            f"env.policies: policy name {shown(name)} must be a name without dots (it names the policy's "
            f"weights, policies.<name>.*, and its metrics), for example {shown(str(name).replace('.', '_') or 'team')}"
            for name in policies
            if not isinstance(name, str) or not name or "." in name
        ]
    return problems


def _check_known_keys(c: ConfigView) -> None:
    from rlpar.config.known_keys import unknown_key_problems

    config = cast(dict, OmegaConf.to_container(c.cfg, resolve=False))
    config.pop("hydra", None)
    try:
        c.problems.extend(unknown_key_problems(config))
    except (ImportError, SyntaxError) as err:  # a _target_ that does not exist
        c.problems.append(f"_target_: {first_line(err)}")


def _check_run_dir(c: ConfigView) -> None:
    run_dir = c.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        c.problems.append(f"run_dir: expected a path, got {shown(run_dir)}")
    elif problem := directory_problem(run_dir):
        c.problems.append(f"run_dir: {problem}")


def directory_problem(directory: str) -> str | None:
    """Why a run could not write into `directory` (run_dir, Hydra's hydra.run.dir), or None: found
    now rather than after a start-up of seconds (Ray), by creating and removing a folder where it would go."""
    import os
    import tempfile

    path = Path(directory).absolute()
    try:
        existing = next(p for p in (path, *path.parents) if p.exists())
    except OSError as err:  # a name longer than the file system allows
        return f"{shown(directory)} cannot be a directory: {err.strerror or err}"
    if not existing.is_dir():
        what = "is a file, not a directory" if existing == path else f"cannot be created: '{existing}' is a file"
        return f"'{directory}' {what}"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rlpar-write-test-", dir=existing))
    except OSError as err:
        where = "" if existing == path else f" (in '{existing}')"
        return f"'{directory}' cannot be written{where}: {err.strerror or err}"
    return None


def _check_hardware(c: ConfigView) -> None:
    _check_device(c, c.get("hardware.device"))
    c.number("hardware.torch_threads", integer=True, low=1)


def _check_device(c: ConfigView, device) -> None:
    if "hardware.device" in c.unresolved:
        return
    if device not in ("cpu", "cuda") and not (isinstance(device, str) and device.startswith("cuda:")):
        c.problems.append(f"hardware.device: {device!r} is not cpu, cuda or cuda:N")
    elif device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            c.problems.append(
                f"hardware.device: {device} requested (hardware=gpu) but no CUDA GPU is visible to PyTorch"
            )


def resume_dir_problem(resume) -> str | None:
    """Why `resume` is not a run directory to continue, or None."""
    run_dir = Path(str(resume))
    if not run_dir.exists():
        return f"resume: '{resume}' does not exist"
    if not run_dir.is_dir():
        return f"resume: '{resume}' is a file; give the run directory (the one holding config.yaml and checkpoints/)"
    if not (run_dir / "config.yaml").is_file():
        return f"resume: '{resume}' is not an rlpar run directory (it has no config.yaml)"
    return None


def _check_signing_key(c: ConfigView) -> None:
    """The key that signs environment state in checkpoints: a broken one is named now, not at the
    first checkpoint (where a run used to stop, keeping none)."""
    from rlpar.signed_pickle import key_problem

    if problem := key_problem():
        c.problems.append(problem)


def _check_resume(c: ConfigView) -> None:
    """A run directory to continue; then the checkpointer says whether it can be (a search's own
    state is its search's rule)."""
    resume = c.get("resume")
    if resume is None:
        return
    if problem := resume_dir_problem(resume):
        c.problems.append(problem)
    elif not c.get("search"):
        c.ask(c.component("checkpoint._target_"), "resume_problems")
