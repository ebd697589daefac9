"""Invalid-action masks an environment gives in `info` (env.action_mask_info_key, issue 43): moved
into the observation (rlpar/envs/wrapping.py ActionMaskFromInfo), so every algorithm and sampler
applies them; counted on real Gymnasium environments (tests/masked_envs.py) that record every
masked action taken."""

import gymnasium as gym
import numpy as np
import pytest

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import EnvSpec, make_env
from rlpar.envs.wrapping import ActionMaskFromInfo
from rlpar.runtime.build import build_trainer
from tests.masked_envs import InfoMaskedChoices, InfoMaskedMultiChoices, masked_actions_in_training

INFO_ENV = ("env.entry_point=tests.masked_envs:InfoMaskedChoices", "env.action_mask_info_key=action_mask")


def test_each_observation_takes_the_mask_of_its_own_info_the_final_one_included():
    env = make_env(EnvSpec(entry_point="tests.masked_envs:InfoMaskedChoices", kwargs={"length": 4},
                           action_mask_info_key="action_mask"))
    assert isinstance(env, ActionMaskFromInfo)
    assert list(env.observation_space.spaces) == ["action_mask", "obs"]  # a Box observation becomes the Dict's `obs`
    obs, info = env.reset(seed=0)
    seen = [(obs, info)]
    for _ in range(4):
        legal = int(np.flatnonzero(obs["action_mask"])[0])
        obs, _, terminated, truncated, info = env.step(legal)
        seen.append((obs, info))
    assert truncated and not terminated
    for obs, info in seen:  # the final observation's mask is the final step's info's
        assert obs in env.observation_space
        np.testing.assert_array_equal(obs["action_mask"], info["action_mask"])
    masks = np.stack([obs["action_mask"] for obs, _ in seen])
    assert len({m.tobytes() for m in masks}) > 1  # the mask changes from step to step


def test_a_dict_observation_gains_the_key_and_per_factor_masks_are_joined():
    inner = InfoMaskedMultiChoices()
    dict_env = gym.wrappers.TransformObservation(
        inner, lambda obs: {"pointer": obs}, gym.spaces.Dict({"pointer": inner.observation_space}))
    env = ActionMaskFromInfo(dict_env, "action_mask")
    assert list(env.observation_space.spaces) == ["action_mask", "pointer"]
    obs, info = env.reset(seed=1)
    assert obs["action_mask"].shape == (7,)
    np.testing.assert_array_equal(obs["action_mask"], np.concatenate(info["action_mask"]))


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ("algo=ppo", "parallel=local"),
    ("algo=dqn", "parallel=multiprocess", "workers=2", "algo.learning_starts=64", "algo.batch_size=16"),
    ("algo=ppo", "parallel=local", "env.entry_point=tests.masked_envs:InfoMaskedMultiChoices"),
], ids=["ppo", "dqn-workers", "ppo-multidiscrete"])
def test_training_takes_no_masked_action_with_the_mask_in_info(make_cfg, tmp_path, overrides):
    """Environments in worker processes count masked actions in a file (`record`); without
    env.action_mask_info_key the same run takes them."""

    def masked_in_training(*extra) -> int:
        masked, rows = masked_actions_in_training(
            make_cfg, tmp_path / f"run{len(extra)}", *INFO_ENV, *overrides, *extra, "envs_per_worker=2",
            "algo.rollout_length=32", iterations=4,
        )
        assert rows[-1]["env_steps"] >= 100
        return masked

    assert masked_in_training() == 0
    assert masked_in_training("env.action_mask_info_key=null") > 5  # the count counts


@pytest.mark.slow
def test_validation_probes_with_legal_actions_from_info(make_cfg):
    before, steps = InfoMaskedChoices.masked_taken, InfoMaskedChoices.steps_taken
    validate_config(make_cfg("algo=ppo", *INFO_ENV))
    assert InfoMaskedChoices.steps_taken - steps >= 5 and InfoMaskedChoices.masked_taken == before


@pytest.mark.parametrize("overrides, words", [
    (("+env.kwargs.info_key=legal",),
     "env.action_mask_info_key: the info of the reset has no 'action_mask' (its keys: legal)"),
    (("+env.kwargs.mask_until=2",),
     "env.action_mask_info_key: the info of a step has no 'action_mask' (its keys: other)"),
    (("env.entry_point=tests.masked_envs:MaskedChoices",),
     "env.action_mask_info_key: the observation already holds 'action_mask'"),
    (("model.action_mask_key=legal",),
     "model.action_mask_key: env.action_mask_info_key puts the mask from info under 'action_mask'"),
    (("env.id=CartPole-v1", "env.entry_point=null", "env.vectorization=native"),
     "env.vectorization: native vector envs are built whole, without the wrapper"),
    (("env.action_mask_info_key=[a]",), "env.action_mask_info_key: expected an info key such as action_mask"),
])
def test_a_mask_key_that_cannot_work_is_refused_in_one_line(make_cfg, overrides, words):
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("algo=ppo", *INFO_ENV, *overrides))
    problems = [p for p in err.value.problems if "action_mask" in p]
    assert len(problems) == 1 and words in problems[0] and "\n" not in problems[0], err.value.problems


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ippo", "mappo"])
def test_pettingzoo_agents_masks_in_their_infos_are_applied(make_cfg, tmp_path, algo):
    """Each agent's `infos[agent]["action_mask"]` moves into its observation (AgentMasksFromInfo):
    no masked action in training, where without env.action_mask_info_key the same run takes them."""

    def masked_in_training(*extra) -> int:
        record = tmp_path / f"masked{len(extra)}.txt"
        cfg = make_cfg("env=pettingzoo", f"algo={algo}", "env.entry_point=tests.multi_agent_envs:info_masked_pickers",
                       "env.action_mask_info_key=action_mask", *extra, f"+env.kwargs.record={record}",
                       "env.global_state=observations", "model.hidden_sizes=[16]", "algo.rollout_length=20",
                       "envs_per_worker=2", "checkpoint.every=0", run_dir=tmp_path / "run")
        trainer = build_trainer(cfg)
        try:
            rows = [trainer.train() for _ in range(3)]
        finally:
            trainer.close()
        assert rows[-1]["agent_steps"] >= 3 * 20 * 2
        return record.read_text().count("\n") if record.exists() else 0

    assert masked_in_training() == 0
    assert masked_in_training("env.action_mask_info_key=null") > 20


@pytest.mark.slow
def test_pettingzoo_validation_probes_legal_actions_from_infos_and_refuses_it_for_turn_based_games(make_cfg):
    from tests.multi_agent_envs import InfoMaskedPickers

    before, steps = InfoMaskedPickers.masked_taken, InfoMaskedPickers.steps_taken
    validate_config(make_cfg("env=pettingzoo", "algo=mappo", "env.entry_point=tests.multi_agent_envs:info_masked_pickers",
                             "env.action_mask_info_key=action_mask"))
    assert InfoMaskedPickers.steps_taken - steps >= 15 and InfoMaskedPickers.masked_taken == before
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("env=pettingzoo", "algo=ppo", "env.id=pettingzoo.classic.tictactoe_v3",
                                 "env.action_mask_info_key=action_mask"))
    problems = [p for p in err.value.problems if "action_mask_info_key" in p]
    assert len(problems) == 1 and "a turn-based game's moves are masked by its seats' observations" in problems[0]
