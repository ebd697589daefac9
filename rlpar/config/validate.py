"""Validate the whole composed config up front and report every problem in one message."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlpar.errors import first_line, shown

SYNC_MODES = ("auto", "blocking", "non_blocking")
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


class _Checker:
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

    def number(self, key: str, *, integer=False, low=None, high=None, low_open=False, high_open=False, optional=False):
        value = self.get(key)
        if key in self.unresolved:
            return None
        if value is None:
            if not optional:
                self.problems.append(f"{key}: missing (expected a number)")
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.problems.append(f"{key}: expected {'an integer' if integer else 'a number'}, got {shown(value)}")
            return None
        if low is not None and (value <= low if low_open else value < low):
            self.problems.append(f"{key}: {shown(value)} is out of range (must be {'>' if low_open else '>='} {low})")
        elif high is not None and (value >= high if high_open else value > high):
            self.problems.append(f"{key}: {shown(value)} is out of range (must be {'<' if high_open else '<='} {high})")
        return value

    def choice(self, key: str, options) -> None:
        value = self.get(key)
        if key not in self.unresolved and value not in options:
            self.problems.append(f"{key}: {shown(value)} is not one of {', '.join(map(str, options))}")


def validate_config(cfg: DictConfig, *, check_env: bool = True) -> None:
    """Raise ConfigError listing every problem; return None when the config is usable.

    `check_env` builds one environment, resets and steps it, and estimates the run's memory."""
    c = _Checker(cfg)
    _check_known_keys(c)
    _check_run_dir(c)
    c.number("seed", integer=True, low=0, high=MAX_SEED)
    c.number("eval_episodes", integer=True, low=0, high=MAX_EVAL_EPISODES)
    total_steps = c.number("total_steps", integer=True, low=1)
    workers = c.number("workers", integer=True, low=1)
    envs_per_worker = c.number("envs_per_worker", integer=True, low=1, high=MAX_ENVS_PER_WORKER)
    if (all(isinstance(n, int) and 1 <= n for n in (total_steps, workers, envs_per_worker))
            and envs_per_worker <= MAX_ENVS_PER_WORKER and workers * envs_per_worker > total_steps):
        c.problems.append(f"envs_per_worker: {workers * envs_per_worker} environments (workers {workers} x envs_per_worker "
                          f"{envs_per_worker}) is more than total_steps ({total_steps}): most would never take a step")
    _check_machine_limits(c, workers)
    _check_algo(c, workers, envs_per_worker)
    _check_env(c, check_env)
    c.choice("parallel.sync_mode", SYNC_MODES)
    if c.get("parallel.max_policy_lag") != "auto":
        c.number("parallel.max_policy_lag", integer=True, low=0, optional=True)
    _check_worker_limits(c, workers)
    _check_inference(c)
    _check_search(c)
    target = str(c.get("parallel._target_") or "")
    if target.endswith("LocalSampler") and c.get("parallel.sync_mode") == "non_blocking":
        c.problems.append("parallel.sync_mode: non_blocking needs parallel=multiprocess or parallel=distributed (local sampling runs in the learner's thread; for one environment process sampling beside the learner, parallel=multiprocess workers=1)")
    c.number("ray.cpus_per_worker", low=0, low_open=True)
    c.number("ray.object_store_mb", integer=True, low=80)
    c.number("ray.num_cpus", low=0, low_open=True, optional=True)
    if target.endswith("DistributedSampler"):
        _check_ray_address(c)
    elif c.get("ray.address"):  # silently training locally instead would surprise
        sampler = target.rsplit(".", 1)[-1] or "this sampler"
        c.problems.append(
            f"ray.address: {c.get('ray.address')!r} (hardware=cluster or ray.address) names a Ray cluster, but "
            f"parallel={_parallel_choice(target)} ({sampler}) uses no Ray; use parallel=distributed, or drop "
            f"hardware=cluster and ray.address"
        )
    _check_hardware(c)
    _check_signing_key(c)
    _check_resume(c)
    c.choice("resume_envs", (True, False))
    c.number("checkpoint.every", integer=True, low=0)
    c.number("checkpoint.keep", integer=True, low=1)
    if c.problems:
        raise ConfigError(list(dict.fromkeys(c.problems)))  # an unresolved key is read more than once


def _parallel_choice(target: str) -> str:
    for choice in ("local", "multiprocess", "distributed"):
        if target.lower().endswith(f"{choice}sampler"):
            return choice
    return target


def _check_worker_limits(c: _Checker, workers) -> None:
    """Failure limits of the multiprocess and Ray samplers (absent for local sampling)."""
    c.number("parallel.max_worker_restarts", integer=True, low=0, optional=True)
    c.number("parallel.sample_timeout_s", low=0, low_open=True, optional=True)
    c.number("parallel.start_timeout_s", low=0, low_open=True, optional=True)
    min_live = c.number("parallel.min_live_workers", integer=True, low=1, optional=True)
    if isinstance(min_live, int) and isinstance(workers, int) and min_live > workers >= 1:
        c.problems.append(f"parallel.min_live_workers: {min_live} is more than workers ({workers})")


Q_LEARNERS = ("DQN", "ApeX", "AsyncDQN")  # algorithm classes whose model is a Q-network
# Algorithms whose workers only act and step (RolloutWorker), so a central server can act for them.
CENTRAL_INFERENCE_LEARNERS = ("PPO", "A2C", "IMPALA", "APPO", "DQN")


def _check_search(c: _Checker) -> None:
    """`search=asha|pbt`: the Tune settings and every key of the space."""
    if not c.get("search"):
        return
    from rlpar.search.space import space_problems

    c.number("search.num_samples", integer=True, low=1)
    c.choice("search.mode", ("max", "min"))
    if not isinstance(c.get("search.metric"), str):
        c.problems.append(f"search.metric: expected a metric name, got {c.get('search.metric')!r}")
    c.number("search.max_concurrent_trials", integer=True, low=1, optional=True)
    c.number("search.learner_cpus", low=0, low_open=True)
    c.number("search.checkpoint_every", integer=True, low=1, optional=True)
    problems = space_problems(c.get("search.space"), c.cfg)
    c.problems.extend(problems)
    scheduler = c.get("search.scheduler")
    if not problems and isinstance(scheduler, dict) and "search.scheduler" not in c.unresolved:
        from rlpar.search.tune_search import scheduler_problem

        if problem := scheduler_problem(scheduler, c.get("search.space")):
            c.problems.append(f"search.scheduler: {problem}")


def _check_inference(c: _Checker) -> None:
    """`parallel.inference` (central: SEED-style inference on the learner's side)."""
    c.choice("parallel.inference", ("worker", "central"))
    if c.get("parallel.inference_backend") is not None:
        c.choice("parallel.inference_backend", ("auto", "numpy", "torch"))
    c.number("parallel.inference_wait_ms", low=0, optional=True)
    learner_class = str(c.get("algo._target_") or "").rsplit(".", 1)[-1]
    if c.get("parallel.inference") == "central" and learner_class not in CENTRAL_INFERENCE_LEARNERS:
        c.problems.append(
            f"parallel.inference: central needs workers that only step environments; algo={c.get('algo.name')}'s "
            f"workers do more ({'compute gradients' if learner_class in ('A3C', 'AsyncDQN') else 'prioritise their own replay with their own ε'}); "
            f"use parallel.inference=worker, or algo=ppo, a2c, impala, appo or dqn"
        )


def _check_algo(c: _Checker, workers, envs_per_worker) -> None:
    takes = _learner_keys(c)

    def number(name, **limits):  # checked where the algorithm takes it (an unreadable _target_ is named once)
        return c.number(f"algo.{name}", **limits) if takes is not None and name in takes else None

    number("lr", low=0, low_open=True)
    number("gamma", low=0, high=1)
    number("gae_lambda", low=0, high=1)
    number("clip", low=0, high=1, low_open=True, high_open=True)
    number("value_coef", low=0)
    number("entropy_coef", low=0)
    number("max_grad_norm", low=0, low_open=True)
    number("epochs", integer=True, low=1)
    number("reward_scale", low=0, low_open=True)
    number("reward_clip", low=0, low_open=True, optional=True)
    number("max_consecutive_nonfinite", integer=True, low=1, optional=True)
    number("target_kl", low=0, low_open=True, optional=True)
    number("value_clip", low=0, low_open=True, optional=True)
    number("n_steps", integer=True, low=1, optional=True)
    number("rmsprop_alpha", low=0, high=1, high_open=True)
    for name in ("n_step", "batch_size", "target_update_every", "weight_sync_interval", "server_sync_interval"):
        number(name, integer=True, low=1)
    for name in ("learning_starts", "exploration_steps"):
        number(name, integer=True, low=0)
    number("replay_ratio", low=0, low_open=True)
    number("exploration_epsilon", low=0, high=1, low_open=True)
    number("exploration_alpha", low=0)
    number("tau", low=0, high=1, low_open=True)
    for name in ("epsilon_start", "epsilon_end"):
        number(name, low=0, high=1)
    if takes is not None and "replay" in takes:
        _check_replay(c, workers, envs_per_worker)
    learner_class = str(c.get("algo._target_") or "").rsplit(".", 1)[-1]
    if learner_class in Q_LEARNERS and not str(c.get("model._target_") or "").endswith("QNetworkSpec"):
        c.problems.append(f"model: algo={c.get('algo.name')} learns Q-values and needs model=q_network, "
                          f"got {c.get('model._target_')}")
    number("optimizer_eps", low=0, low_open=True)
    for name, options in (("advantage", ("nstep", "gae")), ("optimizer", ("rmsprop", "adam")),
                          ("normalize_rewards", ("auto", True, False))):
        if takes is not None and name in takes:
            c.choice(f"algo.{name}", options)
    if c.get("algo.compile") is not None:  # the minibatch learners and A2C
        c.choice("algo.compile", ("auto", True, False))
    rollout = c.number("algo.rollout_length", integer=True, low=1)
    minibatch = number("minibatch_size", integer=True, low=1)
    if None not in (rollout, minibatch, workers, envs_per_worker) and min(rollout, workers, envs_per_worker) >= 1:
        batch = rollout * workers * envs_per_worker
        if minibatch > batch:
            c.problems.append(
                f"algo.minibatch_size: {minibatch} is larger than the batch "
                f"(algo.rollout_length {rollout} x workers {workers} x envs_per_worker {envs_per_worker} = {batch})"
            )
    hidden = c.get("model.hidden_sizes")
    if "model.hidden_sizes" not in c.unresolved and not _positive_integers(hidden):
        c.problems.append(f"model.hidden_sizes: expected a list of positive integers, got {hidden!r}")
    from rlpar.models.spec import ACTING, ACTIVATIONS, ENCODERS

    c.choice("model.activation", tuple(ACTIVATIONS))
    for key, choices in (("model.encoder", ENCODERS), ("model.acting", ACTING)):
        if key.split(".")[1] in (c.get("model") or {}):
            c.choice(key, choices)
    if "normalize_obs" in (c.get("model") or {}):
        c.choice("model.normalize_obs", ("auto", True, False))


def _check_replay(c: _Checker, workers, envs_per_worker) -> None:
    capacity = c.number("algo.replay.capacity", integer=True, low=1)
    for name in ("alpha", "beta_start", "beta_end"):
        c.number(f"algo.replay.{name}", low=0, high=1)
    c.number("algo.replay.num_shards", integer=True, low=1, optional=True)
    _check_rate_limiter(c, workers, envs_per_worker)
    for name in ("batch_size", "learning_starts"):
        value = c.get(f"algo.{name}")
        if isinstance(capacity, int) and isinstance(value, int) and value > capacity:
            c.problems.append(f"algo.{name}: {value} is more than algo.replay.capacity ({capacity})")
    if str(c.get("algo._target_")).endswith(".ApeX") and c.get("algo.replay.checkpoint"):
        c.problems.append("algo.replay.checkpoint: Ape-X's replay shards are not checkpointed (a resumed run refills "
                          "them); drop the key")


def _check_rate_limiter(c: _Checker, workers, envs_per_worker) -> None:
    """Ape-X's per-shard limiter: a tolerance below the least that cannot deadlock is refused."""
    from rlpar.replay.nstep import most_transitions_per_rollout
    from rlpar.replay.rate_limiter import least_tolerance

    ratio = c.number("algo.replay.samples_per_insert", low=0, low_open=True, optional=True)
    tolerance = c.number("algo.replay.rate_tolerance", low=0, low_open=True, optional=True)
    if tolerance is None:
        return
    if ratio is None:
        replay_ratio, batch_size = c.get("algo.replay_ratio"), c.get("algo.batch_size")
        ratio = replay_ratio * batch_size if isinstance(replay_ratio, (int, float)) and isinstance(batch_size, int) else None
    local = str(c.get("parallel._target_") or "").endswith("LocalSampler")
    rollout, n_step, batch_size = (c.get(f"algo.{k}") for k in ("rollout_length", "n_step", "batch_size"))
    numbers = (ratio, workers, envs_per_worker, rollout, n_step, batch_size)
    if not all(isinstance(x, (int, float)) and x > 0 for x in numbers):
        return  # reported by their own checks
    insert_batch = most_transitions_per_rollout(num_envs=envs_per_worker * (workers if local else 1),
                                                rollout_length=rollout, n=n_step)
    least = least_tolerance(samples_per_insert=ratio, insert_batch=insert_batch, sample_batch=batch_size)
    if tolerance < least:
        c.problems.append(f"algo.replay.rate_tolerance: {tolerance} could deadlock; with samples_per_insert {ratio:g}, "
                          f"writes of up to {insert_batch} transitions and minibatches of {batch_size} it must be at "
                          f"least {least:g} (or null)")


def _learner_keys(c: _Checker) -> frozenset[str] | None:
    """The keywords algo._target_ takes; None where they cannot be read (reported elsewhere)."""
    from rlpar.config.known_keys import keyword_parameters

    target = c.get("algo._target_")
    try:
        return keyword_parameters(target) if isinstance(target, str) else None
    except (ImportError, SyntaxError, ValueError):
        return None


def _positive_integers(values) -> bool:
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)


def _check_env(c: _Checker, check_env: bool) -> None:
    from rlpar.envs.factory import API_MODES, VECTORIZATION_MODES, check_env_exists, resolve_env_spec

    c.choice("env.vectorization", VECTORIZATION_MODES)
    c.choice("env.api", API_MODES)
    c.number("env.max_episode_steps", integer=True, low=1, optional=True)
    c.number("env.max_restarts", integer=True, low=0, optional=True)
    c.number("env.restart_window_s", low=0, low_open=True, optional=True)
    if not check_env:
        return
    env_cfg = c.get("env")
    if "env" in c.unresolved:
        return
    if not isinstance(env_cfg, dict):
        c.problems.append("env: missing" if env_cfg is None else f"env: expected a mapping, got {env_cfg!r}")
        return
    shape_problems = _env_shape_problems(env_cfg)
    if shape_problems:
        c.problems.extend(shape_problems)
        return
    spec = resolve_env_spec(**env_cfg)
    problem = check_env_exists(spec)
    if problem:
        c.problems.append(problem)
        return
    c.problems.extend(_probe_env(c, spec))


PROBE_STEPS = 5


def _probe_env(c: _Checker, spec) -> list[str]:
    """Build one environment, check its spaces and the run's memory, then reset and step it: an
    environment that cannot be built or lies about its observations is named now, in one line."""
    import gymnasium as gym
    import numpy as np

    from rlpar.envs.contract import observation_problem, reward_problem
    from rlpar.envs.factory import make_env, vector_mode
    from rlpar.envs.spaces import describe_action_space, describe_observation_space

    name = spec.id or spec.entry_point
    try:
        env = make_env(spec)
    except BaseException as err:  # user code: any exception, MemoryError included
        if isinstance(err, KeyboardInterrupt):
            raise
        return [f"env: building {name} with env.kwargs {spec.kwargs} failed ({type(err).__name__}: {first_line(err)})"]
    try:
        try:
            observation = describe_observation_space(env.observation_space)
            action = describe_action_space(env.action_space)
        except TypeError as err:
            return [f"env: {err}"]
        problem = (_space_problem(c, name, env, observation, action)
                   or _memory_problem(c, observation, action.size, vector_mode(spec)))
        if problem:
            return [problem]
        space = env.observation_space
        box = isinstance(space, gym.spaces.Box)
        env.action_space.seed(0)
        stage = "reset"
        try:
            obs, _ = env.reset(seed=0)
            for step in range(PROBE_STEPS + 1):
                if problem := observation_problem(obs, space):
                    return [f"env: {name} returned {problem} (at {stage})"]
                values = obs if box else gym.spaces.flatten(space, obs)
                if not np.all(np.isfinite(np.asarray(values, dtype=np.float64))):
                    return [f"env: {name} returned NaN or infinite observations after {stage}"]
                if step == PROBE_STEPS:
                    break
                stage = f"step {step + 1}"
                obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                if problem := reward_problem(reward):
                    return [f"env: {name} returned {problem} (at {stage})"]
                if terminated or truncated:
                    stage = "reset"
                    obs, _ = env.reset()
        except Exception as err:
            return [f"env: {name} failed in {stage} ({type(err).__name__}: {first_line(err)})"]
        return []
    finally:
        env.close()


def _space_problem(c: _Checker, name: str, env, observation, action) -> str | None:
    """Spaces the chosen algorithm or model cannot take, in one line naming which."""
    algo = c.get("algo.name")
    if str(c.get("model._target_") or "").endswith("QNetworkSpec") and (not action.discrete or action.factored):
        kind = type(env.action_space).__name__
        return (f"env: algo={algo} (a Q-network) cannot take {name}'s {kind} actions ({env.action_space}): it needs "
                f"one Discrete action space; use algo=ppo, a2c, impala, appo or a3c")
    if observation.image_shape and c.get("model.normalize_obs") is True:
        return (f"model.normalize_obs: {name} has image observations, which the network scales to [0, 1] itself; "
                f"use normalize_obs=auto or false")
    return _model_problem(c, observation, action)


def _model_problem(c: _Checker, observation, action) -> str | None:
    """What the model group refuses for these spaces (a CNN for vectors, images too small for the
    Nature network, ...): the model's own checks, run now rather than at build."""
    from hydra.utils import get_class

    from rlpar.models.spec import ACTING, ENCODERS

    model = dict(c.get("model") or {})
    if model.get("encoder", "auto") not in ENCODERS or model.get("acting", "auto") not in ACTING:
        return None  # reported as choices
    try:
        spec_class = get_class(model.pop("_target_"))
        if model.get("normalize_obs") == "auto":
            model["normalize_obs"] = False
        spec_class(**model, **observation.as_kwargs(), action=action)
    except ValueError as err:
        return f"model: {err}"
    except Exception:  # noqa: BLE001 - unknown targets and keys are reported by their own checks
        return None
    return None


def _memory_problem(c: _Checker, observation, action_size: int, vectorization: str) -> str | None:
    from rlpar.config.resources import estimated_memory_bytes, memory_problem

    numbers = [c.get(k) for k in ("workers", "envs_per_worker", "algo.rollout_length")]
    hidden = c.get("model.hidden_sizes")
    if not all(isinstance(n, int) and n >= 1 for n in numbers) or not _positive_integers(hidden):
        return None  # reported on their own
    if c.sizes_refused:
        return None
    workers, envs_per_worker, rollout = numbers
    local = str(c.get("parallel._target_") or "").endswith("LocalSampler")
    capacity = c.get("algo.replay.capacity") if "replay" in (_learner_keys(c) or ()) else 0
    processes, process_bytes = _worker_processes_here(c, workers)
    object_store = c.get("ray.object_store_mb") if processes and _worker_process_kind(c) == "ray" else 0
    estimate = estimated_memory_bytes(
        obs_dim=observation.obs_dim, obs_dtype=observation.obs_dtype, action_size=action_size, rollout_length=rollout,
        num_envs=workers * envs_per_worker, vectorization=vectorization,
        workers=0 if local else workers, hidden_sizes=hidden, copies_of_batch=2 if local else 3,
        replay_capacity=capacity if isinstance(capacity, int) and capacity > 0 else 0,
        worker_processes=processes, worker_process_bytes=process_bytes,
        object_store_bytes=object_store * 2**20 if isinstance(object_store, int) else 0,
    )
    return memory_problem(estimate)


def _worker_process_kind(c: _Checker) -> str | None:
    """multiprocess (forked workers), ray (env runners of a private Ray instance on this machine),
    or None (in the learner's process, or spread over a user's cluster)."""
    choice = _parallel_choice(str(c.get("parallel._target_") or ""))
    if choice == "multiprocess":
        return "multiprocess"
    return "ray" if choice == "distributed" and not c.get("ray.address") else None


def _worker_processes_here(c: _Checker, workers) -> tuple[int, int]:
    from rlpar.config.resources import WORKER_PROCESS_BYTES

    kind = _worker_process_kind(c)
    if kind is None or not isinstance(workers, int) or workers < 1:
        return 0, 0
    return workers, WORKER_PROCESS_BYTES[kind]


def _check_machine_limits(c: _Checker, workers) -> None:
    """Memory, processes and file descriptors of the worker processes, the first that does not fit
    named (the whole run's memory is estimated later, with the environment's spaces)."""
    from rlpar.config.resources import (FDS_BASE, FDS_PER_WORKER, GIB, RAY_DAEMONS, available_memory_bytes,
                                        file_descriptor_problem, process_problem)

    processes, process_bytes = _worker_processes_here(c, workers)
    if not processes:
        return
    kind = _worker_process_kind(c)
    needed, available = processes * process_bytes, available_memory_bytes()
    if needed > 0.9 * available:
        problem = (f"memory: they need about {needed / GIB:.1f} GiB ({process_bytes // 2**20} MiB each) but "
                   f"{available / GIB:.1f} GiB is available")
    else:
        problem = (process_problem(processes + (RAY_DAEMONS if kind == "ray" else 0))
                   or file_descriptor_problem(FDS_BASE + FDS_PER_WORKER[kind] * processes))
    if problem:
        c.problems.append(f"workers: {workers} worker processes ({kind}) cannot run on this machine: {problem}; "
                          f"use fewer workers")
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
    kwargs = env_cfg.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        problems.append(f"env.kwargs: expected a mapping such as {{render_mode: rgb_array}}, got {shown(kwargs)}")
    return problems


def _check_known_keys(c: _Checker) -> None:
    from rlpar.config.known_keys import unknown_key_problems

    config = OmegaConf.to_container(c.cfg, resolve=False)
    config.pop("hydra", None)
    try:
        c.problems.extend(unknown_key_problems(config))
    except (ImportError, SyntaxError) as err:  # a _target_ that does not exist
        c.problems.append(f"_target_: {first_line(err)}")


def _check_run_dir(c: _Checker) -> None:
    run_dir = c.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir:
        c.problems.append(f"run_dir: expected a path, got {shown(run_dir)}")
    elif problem := directory_problem(run_dir):
        c.problems.append(f"run_dir: {problem}")


def directory_problem(directory: str) -> str | None:
    """Why a run could not write into `directory` (run_dir, Hydra's hydra.run.dir), or None: found
    now rather than after start-up (Ray: ~9 s), by creating and removing a folder where it would go."""
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


def _check_hardware(c: _Checker) -> None:
    _check_device(c, c.get("hardware.device"))
    c.number("hardware.torch_threads", integer=True, low=1)


def _check_device(c: _Checker, device) -> None:
    if "hardware.device" in c.unresolved:
        return
    if device not in ("cpu", "cuda") and not (isinstance(device, str) and device.startswith("cuda:")):
        c.problems.append(f"hardware.device: {device!r} is not cpu, cuda or cuda:N")
    elif device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            c.problems.append(f"hardware.device: {device} requested (hardware=gpu) but no CUDA GPU is visible to PyTorch")


def _check_ray_address(c: _Checker) -> None:
    """Joining a cluster that is not there would otherwise fail only after Ray's long retries."""
    from rlpar.config.ray_address import ray_address_problem

    address = c.get("ray.address")
    problem = ray_address_problem(address) if address else None  # no address: a private instance
    if problem:
        c.problems.append(f"ray.address: {problem}")


def _resolved(c: _Checker) -> dict:
    config = OmegaConf.to_container(c.cfg, resolve=True)
    config.pop("hydra", None)
    return config


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


def _check_signing_key(c: _Checker) -> None:
    """The key that signs environment state in checkpoints: a broken one is named now, not at the
    first checkpoint (where a run used to stop, keeping none)."""
    from rlpar.runtime.signed_pickle import key_problem

    if problem := key_problem():
        c.problems.append(problem)


def _check_resume(c: _Checker) -> None:
    resume = c.get("resume")
    if resume is None:
        return
    problem = resume_dir_problem(resume)
    if problem:
        c.problems.append(problem)
        return
    if c.get("search"):  # a search: Tune's state and each trial's checkpoints
        if not (Path(str(resume)) / "tune").is_dir():
            c.problems.append(f"resume: '{resume}' holds no search state (tune/ is missing)")
        return
    from rlpar.config.changes import config_mismatches
    from rlpar.runtime.checkpoint import latest_valid_checkpoint, untrusted_pickles

    damaged: list = []
    found = latest_valid_checkpoint(str(resume), damaged)
    if found is None and not damaged:
        c.problems.append(f"resume: '{resume}' has no checkpoint to resume from (checkpoints/ is empty or missing)")
    elif found is None:
        c.problems.append(
            f"resume: '{resume}' cannot be resumed: its {len(damaged)} checkpoint(s) are all damaged/unreadable "
            f"(newest: {damaged[0][1]})"
        )
    elif isinstance(found[1].get("config"), dict) and (changed := config_mismatches(_resolved(c), found[1]["config"])):
        c.problems.append(
            f"resume: {Path(str(resume)) / 'config.yaml'} no longer matches {found[0].name}, whose weights and "
            f"environments were made with another config: {'; '.join(changed)}. Put those values back, or train "
            f"them as a new run (a new run_dir)"
        )
    elif c.get("resume_envs") is not False and (untrusted := untrusted_pickles(found[1])):
        c.problems.append(
            f"resume: {found[0].name} holds environment state this user did not write ({untrusted[0]}); nothing "
            f"of it was unpickled. To resume without it (same weights, optimiser and counters, fresh "
            f"environments): python main.py resume={resume} resume_envs=false"
        )
