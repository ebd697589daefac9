"""Composing every config group option, and validation in-process (the CLI's refusals: test_bad_input.py)."""

import pytest

from rlpar.config.conf_dir import CONF_DIR
from rlpar.config.validate import ConfigError, validate_config

GROUPS = ["env", "algo", "model", "parallel", "hardware", "logger"]


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
    elif group == "hardware" and option == "cluster":  # with the default parallel=local
        with pytest.raises(ConfigError, match="uses no Ray"):
            validate_config(cfg)
    elif group == "model" and option.endswith("_cnn"):  # CartPole's vectors are refused; Atari frames taken
        with pytest.raises(ConfigError, match="is a CNN for image observations; these are vectors"):
            validate_config(cfg)
        validate_config(make_cfg(f"{group}={option}", "env=atari"))
    elif f"{group}={option}" in ("algo=apex_sac", "algo=apex_td3"):  # Ray actors: refused on parallel=local
        with pytest.raises(ConfigError, match="runs its actors and replay shards as Ray actors"):
            validate_config(make_cfg(f"{group}={option}", "env=pendulum"))
        validate_config(make_cfg(f"{group}={option}", "env=pendulum", "parallel=distributed", "workers=2"))
    elif f"{group}={option}" in ("algo=sac", "algo=td3"):  # continuous actions: CartPole's are refused
        with pytest.raises(ConfigError, match="learns continuous actions"):
            validate_config(cfg)
        validate_config(make_cfg(f"{group}={option}", "env=pendulum"))
    elif group == "model" and option.endswith("actor_q"):  # the model of SAC (Gaussian) and TD3 (deterministic)
        with pytest.raises(ConfigError, match="model=actor_q learns continuous actions"):
            validate_config(cfg)
        validate_config(make_cfg("algo=" + ("td3" if option.startswith("deterministic") else "sac"), "env=pendulum",
                                 f"{group}={option}"))
    elif f"{group}={option}" in ("env=pettingzoo", "algo=ippo", "algo=mappo"):  # multi-agent: both or neither
        with pytest.raises(ConfigError, match="single-agent"):
            validate_config(cfg)
        validate_config(make_cfg(f"{group}={option}", "algo=ippo" if group == "env" else "env=pettingzoo"))
    else:
        validate_config(cfg)


def yaml_values(path, prefix: str = "") -> dict:
    """A config file's keys, dotted, with their values; interpolations (`${...}`) left out."""
    import yaml

    def flat(tree: dict, prefix: str) -> dict:
        out = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            elif not str(value).startswith("${"):
                out[f"{prefix}{key}"] = value
        return out

    return flat(yaml.safe_load(path.read_text()), prefix)


CARTPOLE_PRESET = CONF_DIR / "preset" / "ppo" / "CartPole-v1.yaml"


def test_defaults_are_ppo_cartpole_local_with_tuned_preset(make_cfg):
    """The default run is PPO on CartPole with every value its preset file sets."""
    from omegaconf import OmegaConf

    cfg = make_cfg()
    assert (cfg.env.id, cfg.algo.name) == ("CartPole-v1", "ppo")
    assert cfg.parallel._target_.endswith("LocalSampler")
    preset = yaml_values(CARTPOLE_PRESET)
    assert preset and {key: OmegaConf.select(cfg, key) for key in preset} == preset
    baseline = yaml_values(CONF_DIR / "algo" / "ppo.yaml", "algo.")
    assert any(baseline.get(key, value) != value for key, value in preset.items())  # the preset changes the baseline
    for knob in ("seed", "total_steps", "workers", "run_dir", "resume"):
        assert knob in cfg


@pytest.mark.parametrize("choice", [["env=acrobot"], ["env.id=Acrobot-v1"]])
def test_baseline_hyperparameters_without_preset(make_cfg, choice):
    """Presets follow the environment trained: CartPole's never reaches Acrobot, which trains
    with the baseline's value of every algorithm key the CartPole preset changes."""
    from omegaconf import OmegaConf

    cfg = make_cfg(*choice)
    baseline = yaml_values(CONF_DIR / "algo" / "ppo.yaml", "algo.")
    changed = [key for key, value in yaml_values(CARTPOLE_PRESET).items() if key in baseline and baseline[key] != value]
    assert changed and {key: OmegaConf.select(cfg, key) for key in changed} == {key: baseline[key] for key in changed}


def test_minibatch_larger_than_batch_is_refused(make_cfg):
    cfg = make_cfg("algo.minibatch_size=100000")
    with pytest.raises(ConfigError, match="algo.minibatch_size"):
        validate_config(cfg)


@pytest.mark.parametrize("value", ["-1", "soon", "1.5", "true"])
def test_compile_switch_is_a_gradient_step_or_ready(make_cfg, value):
    with pytest.raises(ConfigError, match="algo.compile_switch: expected a gradient step .* or ready"):
        validate_config(make_cfg(f"algo.compile_switch={value}"), check_env=False)
    for accepted in ("0", "ready"):
        validate_config(make_cfg(f"algo.compile_switch={accepted}"), check_env=False)


@pytest.mark.parametrize("value, problem", [("1.2", "expected an integer, got 1.2"), ("0", r"0 is out of range \(must be >= 1\)")])
def test_the_private_ray_instance_takes_whole_cpus(make_cfg, value, problem):
    with pytest.raises(ConfigError, match=f"ray.num_cpus: {problem}"):
        validate_config(make_cfg("parallel=distributed", f"ray.num_cpus={value}"), check_env=False)
    validate_config(make_cfg("parallel=distributed", "ray.num_cpus=2"), check_env=False)


@pytest.mark.parametrize("overrides, problem", [
    (["learners=0"], r"learners: 0 is out of range \(must be >= 1\)"),
    (["learners=1.5"], "learners: expected an integer"),
    (["learners=2"], "learners: 2 learners run as Ray actors: use parallel=distributed .* parallel=local learns in one process"),
    (["learners=2", "algo=a3c", "parallel=distributed"], "learners: a3c does not learn in one place .* learners=2 is for .*ppo"),
    (["learners=3", "parallel=distributed", "workers=1", "envs_per_worker=2"], "learners: 3 learners need at least one environment column each; there are 2"),
    (["learners=2", "parallel=distributed", "learner_group.timeout_s=0"], r"learner_group.timeout_s: 0 is out of range"),
    (["learners=2", "algo=mappo", "env=pettingzoo", "env.id=mpe2.simple_spread_v3", "parallel=distributed"],
     r"learners: mappo learns each policy with a PPO learner of its own \(env.policies\), and learners=N splits "
     r"the update of one learner"),
    (["learners=2", "algo=sac", "env=pendulum", "parallel=distributed"], r"learners: sac does not split its update into "
                                                                         r"learning_inputs \(once\) and learn"),
    (["learners=8", "parallel=distributed", "ray.num_cpus=2", "workers=2"],
     r"learners: 8 learners reserve 4 CPU \(ray.cpus_per_learner 0.5 each\) and 2 workers 0.2 \(ray.cpus_per_worker "
     r"0.1\): more than the 2 CPU of the private Ray instance \(ray.num_cpus\), so the group would never start"),
])
def test_learners_need_a_data_parallel_algorithm_on_ray_and_a_column_each(make_cfg, overrides, problem):
    with pytest.raises(ConfigError, match=problem):
        validate_config(make_cfg(*overrides), check_env=False)


def test_nan_and_infinity_are_refused_by_every_range_check_one_line_each(make_cfg):
    """NaN fails every comparison, so a range check alone lets it through (nan as time_limit_s
    meant no limit); infinity is refused where a finite value is needed, and taken where it means
    something (a restart window that never forgets)."""
    overrides = ["time_limit_s=nan", "algo.clip=nan", "env.restart_window_s=nan", "learner_group.timeout_s=nan",
                 "algo.lr=inf", "algo.gamma=-inf", "parallel=multiprocess", "parallel.sample_timeout_s=inf"]
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg(*overrides), check_env=False)
    assert refused.value.problems == [
        "time_limit_s: nan is not a number (expected a number > 0)",
        "learner_group.timeout_s: nan is not a number (expected a number > 0)",
        "algo.gamma: -inf is not finite (expected a finite number >= 0 and <= 1)",
        "algo.lr: inf is not finite (expected a finite number > 0)",
        "algo.clip: nan is not a number (expected a number > 0 and < 1)",
        "env.restart_window_s: nan is not a number (expected a number > 0)",
        "parallel.sample_timeout_s: inf is not finite (expected a finite number > 0)",
    ]
    validate_config(make_cfg("env.restart_window_s=inf"), check_env=False)


@pytest.mark.parametrize("overrides, refusal", [
    (["algo=sac", "env=pendulum", "model.recurrent=lstm"], "model.recurrent: algo=sac learns feed-forward policies only"),
    (["algo=td3", "env=pendulum", "model.recurrent=gru"], "model.recurrent: algo=td3 learns feed-forward policies only"),
    (["algo.nonsense=1"], "algo.nonsense: unknown key (not taken by rlpar.algos.ppo.PPO); it takes "),
    (["resume=some_run", "env.policies=agent"], "env.policies: cannot be changed when resuming (the run continues "
                                                "with its own config; only total_steps, "),
])
def test_a_key_the_config_lacks_gets_no_advice_to_add_it_that_would_be_refused(overrides, refusal):
    from rlpar.config.overrides import override_problems

    (problem,) = override_problems(overrides)
    assert problem.startswith(refusal) and "+" not in problem


def test_advice_to_add_a_key_is_given_where_following_it_is_accepted(make_cfg):
    from rlpar.config.overrides import override_problems

    assert override_problems(["env.kwargs.sutton_barto_reward=true"]) == [
        "env.kwargs.sutton_barto_reward: not a key of the config (add a new key with +env.kwargs.sutton_barto_reward=...)"]
    validate_config(make_cfg("+env.kwargs.sutton_barto_reward=true"), check_env=False)


def test_two_learners_of_ppo_on_ray_are_accepted(make_cfg):
    validate_config(make_cfg("learners=2", "parallel=distributed"), check_env=False)
    validate_config(make_cfg("learners=4", "parallel=distributed", "ray.num_cpus=2", "ray.cpus_per_learner=0.45",
                             "workers=2"), check_env=False)  # 1.8 + 0.2 CPU: the private instance's 2 exactly


@pytest.mark.slow
def test_apex_rate_tolerance_that_could_deadlock_is_refused_with_its_least_value(make_cfg):
    # workers=4, envs_per_worker=2, rollout 32, 3-step: writes of 2 x (32 + 2) = 68 transitions;
    # samples per insert 0.125 x 64 = 8; least tolerance (8 x 68 + 64) / 2 = 304.
    common = ("algo=apex", "parallel=distributed", "workers=4", "envs_per_worker=2")
    with pytest.raises(ConfigError, match=r"rate_tolerance: 303 could deadlock.* at least 304 "):
        validate_config(make_cfg(*common, "algo.replay.rate_tolerance=303"), check_env=False)
    validate_config(make_cfg(*common, "algo.replay.rate_tolerance=304"), check_env=False)
    # parallel=local: one worker steps all 8 environments, so its writes are 4 times larger
    with pytest.raises(ConfigError, match="at least 1120 "):
        validate_config(make_cfg(*common[:1], "parallel=local", *common[2:], "algo.replay.rate_tolerance=304"),
                        check_env=False)


@pytest.mark.parametrize("algo", ["dqn", "apex", "async_dqn"])
def test_q_learners_refuse_an_actor_critic_model(make_cfg, algo):
    with pytest.raises(ConfigError, match=f"algo={algo} learns Q-values and needs model=q_network"):
        validate_config(make_cfg(f"algo={algo}", "model=actor_critic"), check_env=False)


def test_recurrent_model_is_refused_by_algorithms_that_learn_feed_forward_policies_only(make_cfg):
    """An algorithm declares `recurrent_policies`; the base default (False) refuses, naming those that take one."""
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("algo=apex", "model.recurrent=lstm"), check_env=False)
    [problem] = [p for p in err.value.problems if p.startswith("model.recurrent")]
    assert problem.startswith("model.recurrent: algo=apex learns feed-forward policies only; use model.recurrent=null, "
                              "or algo=")
    assert "ppo" in problem.split("or algo=")[1] and "apex" not in problem.split("or algo=")[1]
    validate_config(make_cfg("algo=ppo", "model.recurrent=lstm"), check_env=False)
    validate_config(make_cfg("algo=ppo", "model.recurrent=gru"), check_env=False)


def test_resume_of_missing_directory_is_refused(make_cfg, tmp_path):
    cfg = make_cfg(f"resume={tmp_path / 'nope'}")
    with pytest.raises(ConfigError, match="resume"):
        validate_config(cfg)


def _targets() -> list[str]:
    import yaml

    found = set()
    for path in CONF_DIR.rglob("*.yaml"):
        for line in path.read_text().splitlines():
            if line.strip().startswith("_target_:"):
                found.add(line.split(":", 1)[1].strip())
    return sorted(found)


@pytest.mark.slow
@pytest.mark.parametrize("target", _targets())
def test_declared_keys_are_what_the_constructor_takes(target):
    """Validation takes a node's keys from the class its `_target_` names: an algorithm's typed
    config is what its constructor takes (as `config`), a sampler's config the keywords its
    constructor takes besides the builder's, and a class without one its keywords."""
    import inspect

    from rlpar.config.known_keys import SUPPLIED_BY_BUILD, imported_class
    from rlpar.typed_config import accepted_keys, config_class, declared_keys, keyword_parameters

    cls = imported_class(target)
    declared = config_class(cls)
    if declared is None:  # a logger, checkpointer or search class: its keywords
        assert accepted_keys(cls) == keyword_parameters(cls) and "self" not in accepted_keys(cls)
        return
    assert declared_keys(declared) == accepted_keys(cls)
    if declared is cls:  # a model spec or the replay settings: a dataclass, built from its fields
        assert declared_keys(declared) == set(inspect.signature(cls).parameters)
    elif target.startswith("rlpar.algos."):  # the builder passes the config object first
        assert list(inspect.signature(cls.__init__).parameters)[1] == "config"
        declared()  # every field has a default
    else:  # a sampler: its config's keys and the builder's are its constructor's keywords
        supplied = SUPPLIED_BY_BUILD["parallel"] | {"inference_device"}
        assert declared_keys(declared) == keyword_parameters(cls) - supplied


@pytest.mark.parametrize("override,problem", [
    ("+algo.epoch=5", "algo.epoch: unknown key (not taken by rlpar.algos.ppo.PPO); did you mean algo.epochs?"),
    ("+foo=1", "foo: unknown key (not taken by rlpar's config)"),
    ("+model.hiden_sizes=[8]", "model.hiden_sizes: unknown key (not taken by rlpar.models.spec.PolicySpec); did you mean model.hidden_sizes?"),
    ("+env.max_steps=9", "env.max_steps: unknown key (not taken by env)"),
    ("+ray.adress=x", "ray.adress: unknown key (not taken by ray); did you mean ray.address?"),
    ("+parallel.seed=3", "parallel.seed: unknown key (not taken by rlpar.sampling.local.LocalSampler)"),
    ("+checkpoint.evry=3", "checkpoint.evry: unknown key (not taken by rlpar.runtime.checkpoint.Checkpointer); did you mean checkpoint.every?"),
])
def test_every_component_refuses_keys_it_does_not_take(make_cfg, override, problem):
    with pytest.raises(ConfigError) as refused:
        validate_config(make_cfg(override), check_env=False)
    assert [p for p in refused.value.problems if p.startswith(problem)], refused.value.problems


def test_free_form_keys_are_not_checked(make_cfg):
    validate_config(make_cfg("logger=wandb", "+logger.wandb.tags=[a]", "+env.kwargs.sutton_barto_reward=true"))


@pytest.mark.parametrize(
    "overrides,envs,rollout",
    [
        (["workers=1"], 8, 64),
        (["workers=2"], 4, 64),
        (["workers=3"], 3, 57),
        (["workers=8"], 1, 64),
        (["workers=16"], 1, 32),
        (["workers=32"], 1, 32),  # 32 steps at least: 1,024 steps an iteration
        (["workers=1", "envs_per_worker=64"], 64, 32),
    ],
)
def test_cartpole_preset_keeps_512_steps_per_iteration_and_rollouts_of_32_steps_at_least(
    make_cfg, overrides, envs, rollout
):
    cfg = make_cfg(*overrides)
    assert (cfg.envs_per_worker, cfg.algo.rollout_length) == (envs, rollout)


def test_keys_the_user_sets_win_over_the_preset(make_cfg):
    cfg = make_cfg("algo.lr=0.01", "model.activation=elu", "envs_per_worker=3")
    assert (cfg.algo.lr, cfg.model.activation, cfg.envs_per_worker) == (0.01, "elu", 3)
    assert cfg.algo.epochs == 2  # the rest of the preset still applies (the baseline has 10)
    table_row = make_cfg("env=pendulum", "+table_row=local_1env")  # a @package _global_ option sets them
    assert (table_row.workers, table_row.envs_per_worker) == (1, 1)


@pytest.mark.slow
def test_every_preset_key_is_a_config_key(make_cfg):
    """A preset key that no config has would be added silently by the composition and refused
    only by validation. A namespace's preset (ALE.yaml) is checked against its env group's keys."""
    import yaml
    from omegaconf import OmegaConf

    from rlpar.config.presets import PRESET_DIR

    def flat_keys(tree, prefix=""):
        for key, value in tree.items():
            yield from flat_keys(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [f"{prefix}{key}"]

    for path in PRESET_DIR.glob("*/*.yaml"):
        env_group = ["env=atari"] if path.stem == "ALE" else []
        cfg = make_cfg(f"algo={path.parent.name}", *env_group, "preset=null")
        for key in flat_keys(yaml.safe_load(path.read_text())):
            assert OmegaConf.select(cfg, key, default="absent", throw_on_resolution_failure=False) != "absent", (path, key)


def test_run_folders_are_named_after_the_environment_trained():
    """With both env.id and env.entry_point set, make_env builds the entry point: so is the run named."""
    from rlpar.config.resolvers import env_name

    assert env_name("CartPole-v1", "benchmarks.frames_env:FramesEnv") == "FramesEnv"
    assert env_name("CartPole-v1", None) == "CartPole-v1"
    assert env_name(None, "my_pkg.envs.Grid") == "Grid"
