"""Hints that point right: the algorithms a refusal suggests are those whose class declares it
learns the environment's action space (`Algorithm.action_spaces`), found through conf/algo/*.yaml."""

import pytest

from rlpar.config.compose import compose_config
from rlpar.config.known_keys import algorithm_options
from rlpar.config.validate import ConfigError, validate_config


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as refused:
        validate_config(compose_config(list(overrides), run_dir="/tmp/unused"))
    (problem,) = refused.value.problems
    return problem


def suggested(problem: str) -> list[str]:
    return problem.rsplit("use algo=", 1)[1].replace(" or ", ", ").split(", ")


@pytest.mark.slow
def test_dqn_on_pendulum_suggests_every_algorithm_that_learns_box_actions_sac_and_td3_included():
    problem = refusal("algo=dqn", "env=pendulum")
    assert problem.startswith("env: algo=dqn (a Q-network) cannot take Pendulum-v1's Box actions")
    assert suggested(problem) == ["a2c", "a3c", "appo", "impala", "ppo", "sac", "td3"]


@pytest.mark.slow
def test_sac_on_cartpole_suggests_the_algorithms_that_learn_discrete_actions():
    problem = refusal("algo=sac")
    assert problem.startswith("env: algo=sac with model=actor_q learns continuous actions and cannot take CartPole-v1's")
    assert suggested(problem) == ["a2c", "a3c", "apex", "appo", "async_dqn", "dqn", "impala", "ppo"]


def test_every_algorithm_option_declares_the_action_spaces_it_learns():
    declared = {name: options.get("action_spaces") for name, options in algorithm_options().items()}
    assert all(declared.values()), declared
    assert [name for name, spaces in declared.items() if "Box" not in spaces] == ["apex", "async_dqn", "dqn"]
    assert [name for name, spaces in declared.items() if "Discrete" not in spaces] == ["apex_sac", "apex_td3", "sac", "td3"]


@pytest.mark.slow
def test_a_refusal_on_a_sampler_without_ray_suggests_no_algorithm_that_needs_ray():
    """algo=apex_sac and apex_td3 learn Box actions too, but parallel=local would refuse them."""
    assert suggested(refusal("algo=dqn", "env=pendulum", "parallel=distributed")) == [
        "a2c", "a3c", "apex_sac", "apex_td3", "appo", "impala", "ppo", "sac", "td3"]
    assert "apex_sac" not in suggested(refusal("algo=dqn", "env=pendulum", "parallel=multiprocess"))


@pytest.mark.slow
def test_a_misspelt_key_of_an_algorithm_gets_the_nearest_key_not_advice_to_add_it():
    """`+algo.lrr=0.1` would be refused next (PPO takes no lrr): the refusal, with the key it meant."""
    from rlpar.config.overrides import override_problems

    assert override_problems(["algo.lrr=0.1"]) == [
        "algo.lrr: unknown key (not taken by rlpar.algos.ppo.PPO); did you mean algo.lr?"]
