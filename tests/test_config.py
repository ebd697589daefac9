"""Composing every config group option, and validation in-process (the CLI's refusals: test_bad_input.py)."""

import pytest

from rlpar.config.compose import CONF_DIR
from rlpar.config.validate import ConfigError, validate_config

GROUPS = ["env", "algo", "parallel", "hardware", "logger"]


def options(group):
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes(make_cfg, group, option):
    cfg = make_cfg(f"{group}={option}")
    for key in GROUPS:
        assert key in cfg
    if group == "hardware" and option == "gpu":
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            validate_config(cfg)
    else:
        validate_config(cfg)


def test_defaults_are_ppo_cartpole_local_with_tuned_preset(make_cfg):
    cfg = make_cfg()
    assert cfg.env.id == "CartPole-v1"
    assert cfg.algo.name == "ppo"
    assert cfg.parallel._target_.endswith("LocalSampler")
    assert cfg.algo.rollout_length == 32  # from conf/tuned/ppo_cartpole.yaml, not the baseline 128
    for knob in ("seed", "total_steps", "workers", "run_dir", "resume"):
        assert knob in cfg


def test_baseline_hyperparameters_without_preset(make_cfg):
    cfg = make_cfg("env.id=Acrobot-v1", "env=acrobot")
    assert (cfg.algo.lr, cfg.algo.gamma, cfg.algo.gae_lambda, cfg.algo.clip) == (3e-4, 0.99, 0.95, 0.2)
    assert (cfg.algo.value_coef, cfg.algo.entropy_coef, cfg.algo.max_grad_norm) == (0.5, 0.01, 0.5)
    assert (cfg.algo.epochs, cfg.algo.minibatch_size) == (10, 64)


def test_minibatch_larger_than_batch_is_refused(make_cfg):
    cfg = make_cfg("algo.minibatch_size=100000")
    with pytest.raises(ConfigError, match="algo.minibatch_size"):
        validate_config(cfg)


def test_resume_of_missing_directory_is_refused(make_cfg, tmp_path):
    cfg = make_cfg(f"resume={tmp_path / 'nope'}")
    with pytest.raises(ConfigError, match="resume"):
        validate_config(cfg)
