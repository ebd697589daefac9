"""Turn a validated config into a Trainer, instantiating each part through its `_target_`."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gymnasium as gym
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from rlpar.config.known_keys import ALGO_KEYS_NOT_FOR_LEARNER
from rlpar.config.validate import ConfigError
from rlpar.envs.factory import make_env, resolve_env_spec
from rlpar.envs.spaces import describe_action_space, describe_observation_space, whitened_by_default
from rlpar.logging.progress import ProgressLine
from rlpar.models.spec import PolicySpec
from rlpar.runtime import run_dir as run_directory
from rlpar.runtime import run_lock
from rlpar.runtime.trainer import Trainer



def probe_policy_spec(env_spec, make_spec, *, normalize_obs: bool | str | None = "auto") -> tuple[PolicySpec, bool]:
    """Build one environment to read its spaces, and describe the matching network
    (`make_spec`: the model group, instantiated partially). Also says whether the observations
    are a Box vector: `auto` reward normalisation (in the algorithm) is on exactly then, as in
    every strong continuous-control PPO; `auto` observation whitening is on for them and for Dict
    and Tuple spaces holding a Box (`whitened_by_default`). Images are scaled by the network."""
    env = make_env(env_spec)
    try:
        observation = describe_observation_space(env.observation_space)
        action = describe_action_space(env.action_space)
        box = isinstance(env.observation_space, gym.spaces.Box) and not observation.image_shape
        whiten = whitened_by_default(env.observation_space)
    except TypeError as err:
        raise ConfigError([f"env: {err}"]) from err
    finally:
        env.close()
    options = {} if normalize_obs is None else {"normalize_obs": whiten if normalize_obs == "auto" else normalize_obs}
    try:
        return make_spec(**observation.as_kwargs(), action=action, **options), box
    except ValueError as err:  # e.g. a Q-network for continuous actions
        raise ConfigError([f"model: {err}"]) from err


def sampling_defaults(parallel: dict, algo_cls) -> dict:
    """`auto` sync mode and policy-lag limit: the algorithm's own (IMPALA samples while learning)."""
    chosen = {}
    if parallel.get("sync_mode") == "auto":
        local = str(parallel.get("_target_", "")).endswith("LocalSampler")
        chosen["sync_mode"] = "blocking" if local else algo_cls.sync_mode
    if parallel.get("max_policy_lag") == "auto":
        chosen["max_policy_lag"] = algo_cls.max_policy_lag
    return chosen


def build_trainer(cfg: DictConfig, *, progress: bool | None = None) -> Trainer:
    container = OmegaConf.to_container(cfg, resolve=True)
    run_dir = Path(container["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(container["hardware"]["torch_threads"])
    env_spec = resolve_env_spec(**container["env"])
    algo = container["algo"]
    policy_spec, box_observations = probe_policy_spec(env_spec, instantiate(cfg.model, _partial_=True, _convert_="all"),
                                                      normalize_obs=container["model"].get("normalize_obs"))

    make_sampler = instantiate(cfg.parallel, _partial_=True, _convert_="all")
    algo_cls = get_class(algo["_target_"])
    sampler = make_sampler(
        **sampling_defaults(container["parallel"], algo_cls),
        env_spec=env_spec,
        policy_spec=policy_spec,
        num_workers=container["workers"],
        envs_per_worker=container["envs_per_worker"],
        rollout_length=algo["rollout_length"],
        seed=container["seed"],
        worker_class=algo_cls.worker_class,
        worker_options=algo_cls.worker_options(algo),
        inference_device=container["hardware"]["device"],
    )
    algo_cfg = OmegaConf.create({k: v for k, v in algo.items() if k not in ALGO_KEYS_NOT_FOR_LEARNER})
    if algo_cfg.get("normalize_rewards") == "auto":
        algo_cfg.normalize_rewards = box_observations
    try:
        algorithm = instantiate(algo_cfg, _partial_=True, _convert_="all")(
            sampler=sampler,
            policy_spec=policy_spec,
            total_steps=container["total_steps"],
            seed=container["seed"],
            device=container["hardware"]["device"],
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
        progress=ProgressLine(container["total_steps"], enabled=show),
        run_config=container,
    )
    try:
        if run_directory.claim(run_dir, config=container):
            trainer.release_run_dir = partial(run_lock.release, run_dir)
    except BaseException:
        trainer.close()  # its workers and Ray actors must not outlive a refused directory
        raise
    return trainer
