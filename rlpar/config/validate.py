"""Validate the whole composed config up front and report every problem in one message."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

SYNC_MODES = ("blocking", "non_blocking")


class ConfigError(Exception):
    """Every problem found in a config, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class _Checker:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.problems: list[str] = []

    def get(self, key: str):
        return OmegaConf.select(self.cfg, key, default=None, throw_on_missing=False)

    def number(self, key: str, *, integer=False, low=None, high=None, low_open=False, high_open=False, optional=False):
        value = self.get(key)
        if value is None:
            if not optional:
                self.problems.append(f"{key}: missing (expected a number)")
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.problems.append(f"{key}: expected {'an integer' if integer else 'a number'}, got {value!r}")
            return None
        if low is not None and (value <= low if low_open else value < low):
            self.problems.append(f"{key}: {value} is out of range (must be {'>' if low_open else '>='} {low})")
        elif high is not None and (value >= high if high_open else value > high):
            self.problems.append(f"{key}: {value} is out of range (must be {'<' if high_open else '<='} {high})")
        return value

    def choice(self, key: str, options) -> None:
        value = self.get(key)
        if value not in options:
            self.problems.append(f"{key}: {value!r} is not one of {', '.join(map(str, options))}")


def validate_config(cfg: DictConfig, *, check_env: bool = True) -> None:
    """Raise ConfigError listing every problem; return None when the config is usable."""
    c = _Checker(cfg)
    c.number("seed", integer=True, low=0)
    c.number("total_steps", integer=True, low=1)
    workers = c.number("workers", integer=True, low=1)
    envs_per_worker = c.number("envs_per_worker", integer=True, low=1)
    _check_algo(c, workers, envs_per_worker)
    _check_env(c, check_env)
    c.choice("parallel.sync_mode", SYNC_MODES)
    c.number("parallel.max_policy_lag", integer=True, low=0)
    target = str(c.get("parallel._target_") or "")
    if target.endswith("LocalSampler") and c.get("parallel.sync_mode") == "non_blocking":
        c.problems.append("parallel.sync_mode: non_blocking needs parallel=multiprocess or parallel=distributed (local sampling runs in the learner's thread)")
    c.number("ray.cpus_per_worker", low=0, low_open=True)
    c.number("ray.object_store_mb", integer=True, low=80)
    c.number("ray.num_cpus", low=0, low_open=True, optional=True)
    _check_hardware(c)
    _check_resume(c)
    c.number("checkpoint.every", integer=True, low=0)
    c.number("checkpoint.keep", integer=True, low=1)
    if c.problems:
        raise ConfigError(c.problems)


def _check_algo(c: _Checker, workers, envs_per_worker) -> None:
    c.number("algo.lr", low=0, low_open=True)
    c.number("algo.gamma", low=0, high=1)
    c.number("algo.gae_lambda", low=0, high=1)
    c.number("algo.clip", low=0, high=1, low_open=True, high_open=True)
    c.number("algo.value_coef", low=0)
    c.number("algo.entropy_coef", low=0)
    c.number("algo.max_grad_norm", low=0, low_open=True)
    c.number("algo.epochs", integer=True, low=1)
    c.number("algo.reward_scale", low=0, low_open=True)
    c.number("algo.target_kl", low=0, low_open=True, optional=True)
    c.number("algo.value_clip", low=0, low_open=True, optional=True)
    rollout = c.number("algo.rollout_length", integer=True, low=1)
    minibatch = c.number("algo.minibatch_size", integer=True, low=1)
    if None not in (rollout, minibatch, workers, envs_per_worker) and min(rollout, workers, envs_per_worker) >= 1:
        batch = rollout * workers * envs_per_worker
        if minibatch > batch:
            c.problems.append(
                f"algo.minibatch_size: {minibatch} is larger than the batch "
                f"(algo.rollout_length {rollout} x workers {workers} x envs_per_worker {envs_per_worker} = {batch})"
            )
    hidden = c.get("algo.model.hidden_sizes")
    if hidden is None or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden):
        c.problems.append(f"algo.model.hidden_sizes: expected a list of positive integers, got {hidden!r}")
    from rlpar.models.spec import ACTIVATIONS

    c.choice("algo.model.activation", tuple(ACTIVATIONS))


def _check_env(c: _Checker, check_env: bool) -> None:
    from rlpar.envs.factory import API_MODES, VECTORIZATION_MODES, check_env_exists, resolve_env_spec

    c.choice("env.vectorization", VECTORIZATION_MODES)
    c.choice("env.api", API_MODES)
    c.number("env.max_episode_steps", integer=True, low=1, optional=True)
    if not check_env:
        return
    env_cfg = c.get("env")
    if env_cfg is None:
        c.problems.append("env: missing")
        return
    problem = check_env_exists(resolve_env_spec(**OmegaConf.to_container(env_cfg, resolve=True)))
    if problem:
        c.problems.append(problem)


def _check_hardware(c: _Checker) -> None:
    device = c.get("hardware.device")
    if device not in ("cpu", "cuda") and not (isinstance(device, str) and device.startswith("cuda:")):
        c.problems.append(f"hardware.device: {device!r} is not cpu, cuda or cuda:N")
    elif str(device).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            c.problems.append(f"hardware.device: {device} requested (hardware=gpu) but no CUDA GPU is visible to PyTorch")
    c.number("hardware.torch_threads", integer=True, low=1)


def _check_resume(c: _Checker) -> None:
    resume = c.get("resume")
    if resume is None:
        return
    run_dir = Path(str(resume))
    if not run_dir.is_dir():
        c.problems.append(f"resume: '{resume}' is not a directory")
    elif not (run_dir / "config.yaml").is_file():
        c.problems.append(f"resume: '{resume}' has no config.yaml (not an rlpar run directory)")
    else:
        from rlpar.runtime.checkpoint import latest_valid_checkpoint

        if latest_valid_checkpoint(run_dir) is None:
            c.problems.append(f"resume: '{resume}' holds no valid checkpoint under checkpoints/")
