"""Turn a validated config into a Trainer, instantiating each part through its `_target_`."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from rlpar.config.known_keys import ALGO_KEYS_NOT_FOR_LEARNER
from rlpar.config.validate import ConfigError
from rlpar.envs.factory import TURN_BASED_ENTRY_POINT, resolve_env_spec
from rlpar.envs.probe import EnvProbe, probe_env
from rlpar.envs.state_pickle import state_dropped_message
from rlpar.learning.optimization.precision import resolve_precision
from rlpar.learning.peers import BatchShape
from rlpar.logging.progress import ProgressLine
from rlpar.models.multi_agent import MultiAgentSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime import run_dir as run_directory
from rlpar.runtime import run_lock
from rlpar.runtime.trainer import Trainer
from rlpar.selfplay.pool import OpponentPool, pool_config
from rlpar.typed_config import config_class

log = logging.getLogger("rlpar")


def probe_policy_spec(
    env_spec, make_spec, *, normalize_obs: bool | str | None = "auto", probe: EnvProbe | None = None
) -> tuple[PolicySpec | MultiAgentSpec, bool]:
    """The network matching the spaces of `env_spec`'s environments, read from `probe` (validation's
    probe of the same spec) or from one environment built here (`make_spec`: the model group,
    instantiated partially), and whether its observations are a Box vector: `auto` reward
    normalisation (in the algorithm) is on exactly then, as in every strong continuous-control
    PPO; `auto` observation whitening is on for them and for Dict and Tuple spaces holding a Box
    (`whitened_by_default`). Images are scaled by the network."""
    if probe is None or probe.spec != env_spec:
        probe = probe_env(env_spec, steps=0)
    if probe.problem:
        raise ConfigError([probe.problem])
    options = (
        {} if normalize_obs is None else {"normalize_obs": probe.whitened if normalize_obs == "auto" else normalize_obs}
    )
    try:
        if probe.agents is not None:  # a PettingZoo environment: a policy per agent group
            return MultiAgentSpec.from_layout(probe.agents, make_spec, **options), probe.vector_observations
        assert probe.observation is not None  # a probe without a problem read the observation space
        return make_spec(**probe.observation.as_kwargs(), action=probe.action, **options), probe.vector_observations
    except ValueError as err:  # e.g. a Q-network for continuous actions
        raise ConfigError([f"model: {err}"]) from err


def sampling_defaults(parallel: dict, algo_cls) -> dict:
    """`auto` sync mode and policy-lag limit: the algorithm's own (IMPALA samples while learning)."""
    chosen = {}
    if parallel.get("sync_mode") == "auto":
        sampler_cls: Any = get_class(parallel["_target_"])  # a Sampler subclass: its class attributes are read
        sync_modes = sampler_cls.sync_modes
        chosen["sync_mode"] = algo_cls.sync_mode if algo_cls.sync_mode in sync_modes else "blocking"
    if parallel.get("max_policy_lag") == "auto":
        chosen["max_policy_lag"] = algo_cls.max_policy_lag
    return chosen


def algorithm_maker(algo: dict, algo_cls, *, box_observations: bool) -> partial:
    """The class with its typed config built from the `algo` node, or with its keywords for a
    class that declares no config (a user's own): the learner's keys, with nested
    `_target_` nodes (the replay) instantiated and `normalize_rewards: auto` resolved (on for Box
    vector observations)."""
    keys = {k: v for k, v in algo.items() if k not in ("_target_", *ALGO_KEYS_NOT_FOR_LEARNER)}
    if keys.get("normalize_rewards") == "auto":
        keys["normalize_rewards"] = box_observations
    keys = instantiate(OmegaConf.create(keys), _convert_="all")
    declared = config_class(algo_cls)
    return partial(algo_cls, declared(**keys)) if declared is not None else partial(algo_cls, **keys)


def build_trainer(cfg: DictConfig, *, progress: bool | None = None, env_probe: EnvProbe | None = None) -> Trainer:
    """`env_probe`: validation's probe of this config's environment (rlpar.envs.probe), reused
    rather than building another; None: one environment is built here to read its spaces."""
    container = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
    run_dir = Path(container["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(container["hardware"]["torch_threads"])
    algo = dict(container["algo"])  # resolved below (precision); the run's config and checkpoints keep `auto`
    algo_cls: Any = get_class(algo["_target_"])  # an Algorithm subclass: its class attributes are read
    env_spec = resolve_env_spec(**container["env"], centralised_critic=getattr(algo_cls, "centralised_critic", False))
    policy_spec, box_observations = probe_policy_spec(
        env_spec,
        instantiate(cfg.model, _partial_=True, _convert_="all"),
        probe=env_probe,
        normalize_obs=container["model"].get("normalize_obs"),
    )

    if "precision" in algo:  # resolved once, for the learner and any workers that compute gradients
        algo["precision"] = resolve_precision(
            algo["precision"],
            images=getattr(policy_spec, "has_images", False),
            device=container["hardware"]["device"],
            allowed=getattr(algo_cls, "precisions", ("fp32",)),
        )
        log.info("algo.precision: %s", algo["precision"])
    make_sampler = instantiate(cfg.parallel, _partial_=True, _convert_="all")
    sampler = make_sampler(
        **sampling_defaults(container["parallel"], algo_cls),
        env_spec=env_spec,
        policy_spec=policy_spec,
        num_workers=container["workers"],
        envs_per_worker=container["envs_per_worker"] * getattr(policy_spec, "agents_per_env", 1),  # columns
        rollout_length=algo["rollout_length"],
        seed=container["seed"],
        worker_class=algo_cls.worker_class,
        worker_options=algo_cls.worker_options(algo),
        inference_device=container["hardware"]["device"],
    )
    if env_probe is not None and env_probe.spec == env_spec and env_probe.state_problem and sampler.keeps_env_state():
        log.warning("%s", state_dropped_message(env_probe.name, env_probe.state_problem))
        sampler.drop_env_state(env_probe.state_problem)
    make_algorithm = partial(
        algorithm_maker(algo, algo_cls, box_observations=box_observations),
        policy_spec=policy_spec,
        total_steps=container["total_steps"],
        seed=container["seed"],
        device=container["hardware"]["device"],
    )
    try:
        algorithm = make_algorithm(sampler=sampler)
        if env_spec.entry_point == TURN_BASED_ENTRY_POINT and env_spec.opponent == "pool":
            algorithm.opponent_pool = OpponentPool(pool_config(env_spec.opponent_pool))
        if container["learners"] > 1:
            group = container["learner_group"]
            # rank 0's learner learns with the group as its peers; ranks 1..N-1 hold replicas of it
            # (an algorithm that learns itself, built without sampling: told the batches' shape)
            algorithm.peers = sampler.start_learner_group(
                make_learner=algorithm.make_learner or partial(make_algorithm, sampler=BatchShape.of(sampler)),
                world_size=container["learners"],
                seed=container["seed"],
                torch_threads=container["hardware"]["torch_threads"],
                timeout_s=group["timeout_s"],
                max_restarts=group["max_restarts"],
            )
    except BaseException:
        sampler.close()  # its workers and Ray actors must not outlive a failed build
        raise
    logger = instantiate(cfg.logger, _partial_=True, _convert_="all")(run_dir=str(run_dir), config=container)
    checkpointer = instantiate(cfg.checkpoint, _partial_=True, _convert_="all")(run_dir=str(run_dir))
    show = container.get("progress", True) if progress is None else progress
    trainer = Trainer(
        algorithm=algorithm,
        env_spec=env_spec,
        total_steps=container["total_steps"],
        seed=container["seed"],
        logger=logger,
        checkpointer=checkpointer,
        progress=ProgressLine(container["total_steps"], enabled=show, time_limit_s=container.get("time_limit_s")),
        run_config=container,
        time_limit_s=container.get("time_limit_s"),
    )
    try:
        if run_directory.claim(run_dir, config=container):
            trainer.release_run_dir = partial(run_lock.release, run_dir)
    except BaseException:
        trainer.close()  # its workers and Ray actors must not outlive a refused directory
        raise
    return trainer
