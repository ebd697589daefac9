"""Invalid-action masks of PettingZoo agents (issue 43): each agent's Dict observation holds its
`action_mask`, and IPPO and MAPPO (its centralised critic included) take no masked action, counted
on a real parallel environment (tests/multi_agent_envs.py MaskedPickers) that records every one."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.factory import EnvSpec, make_parallel_env, multi_agent_vector_env
from rlpar.envs.pettingzoo import agent_layout
from rlpar.envs.spaces import draw_noise
from rlpar.models.action_masks import MASKED_LOGIT
from rlpar.models.multi_agent import MultiAgentSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import build_trainer
from rlpar.runtime.evaluation import evaluate_policy
from tests.masked_envs import masked_actions_in_training
from tests.multi_agent_envs import MaskedPickers

PICKERS = EnvSpec(kind="pettingzoo", entry_point="tests.multi_agent_envs:masked_pickers")
MASKED_ENV = ("env=pettingzoo", "env.entry_point=tests.multi_agent_envs:masked_pickers")


def pickers_spec(global_state=None, **fields) -> MultiAgentSpec:
    layout = agent_layout(make_parallel_env(PICKERS), global_state=global_state)
    return MultiAgentSpec.from_layout(layout, PolicySpec, hidden_sizes=(16,), normalize_obs=False, **fields)


def weights_of(module) -> dict:
    return {name: value.detach().numpy() for name, value in module.state_dict().items()}


def test_each_policy_finds_its_agents_mask_and_mapppos_critic_skips_the_masks_in_the_state():
    """Rows: the agent's own Dict (action_mask, then obs), then the global state of every agent's
    observation. Neither tower reads a mask, the agent's own or the state's copies."""
    spec = pickers_spec(global_state="observations")
    policies = dict(spec.policies)
    assert set(policies) == {"picker", "scout"}
    picker, scout = policies["picker"], policies["scout"]
    assert picker.mask_columns == (0, 5) and scout.mask_columns == (0, 3)
    assert picker.actor_inputs == 10 and scout.actor_inputs == 6
    state_masks = {"picker": [(10, 15), (20, 25), (30, 33)], "scout": [(6, 11), (16, 21), (26, 29)]}
    for name, policy in policies.items():
        read = np.ones(policy.obs_dim, bool)
        for start, stop in [policy.mask_columns, *state_masks[name]]:
            read[start:stop] = False
        np.testing.assert_array_equal(policy.input_keep.astype(bool), read)
        model = policy.build()
        rows = torch.as_tensor(np.random.default_rng(0).random((32, policy.obs_dim)).round(), dtype=torch.float32)
        rows[:, 0] = 1.0  # a legal action in every row (a row with none falls back to no mask)
        flipped = rows.clone()
        flipped[:, ~torch.as_tensor(read)] = 1.0  # every mask all legal: legal logits and values unchanged
        (out, values), (out_all, values_all) = model.towers(rows), model.towers(flipped)
        width = policy.action.size
        legal = rows[:, :width] > 0.5
        assert torch.equal(out[legal], out_all[legal]) and torch.equal(values, values_all)
        assert (out[~legal] == MASKED_LOGIT).all()
    assert pickers_spec(global_state="observations", mask_as_input=True).policies[0][1].input_keep is None


def count_masked(spec: MultiAgentSpec, global_state=None, steps: int = 300, envs: int = 2) -> int:
    """Masked actions taken by `spec`'s acting copies (fresh weights) in `steps` steps of `envs`
    environments, every action sampled as rollouts sample it."""
    acting = spec.acting_policy()
    acting.set_weights(weights_of(spec.build()))
    venv = multi_agent_vector_env(replace(PICKERS, global_state=global_state), 3 * envs)
    rng = np.random.default_rng(0)
    before = MaskedPickers.masked_taken
    obs, _ = venv.reset(seed=0)
    for _ in range(steps):
        actions, _, _ = acting.act(acting.normalize(obs), draw_noise(rng, spec.action, venv.num_envs))
        obs, *_ = venv.step(actions)
    venv.close()
    return MaskedPickers.masked_taken - before


@pytest.mark.parametrize("global_state", [None, "observations"], ids=["ippo", "mappo"])
def test_every_agents_acting_copy_takes_no_masked_action(global_state):
    assert count_masked(pickers_spec(global_state), global_state) == 0
    unmasked = pickers_spec(global_state, action_mask_key=None)
    assert count_masked(unmasked, global_state, steps=50) > 20  # the count counts


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ("algo=ippo", "parallel=local"),
    ("algo=mappo", "parallel=local", "env.global_state=observations"),
    ("algo=mappo", "parallel=multiprocess", "workers=2", "env.global_state=observations"),
    ("algo=ippo", "parallel=multiprocess", "workers=2", "parallel.inference=central", "parallel.sync_mode=blocking"),
], ids=["ippo", "mappo", "mappo-workers", "ippo-central-inference"])
def test_ippo_and_mappo_train_without_masked_actions(make_cfg, tmp_path, overrides):
    """Environments in worker processes count masked actions in a file (`record`); the same run
    reading the mask as an observation (action_mask_key=null) takes them."""

    def masked_in_training(*extra) -> tuple[int, dict]:
        masked, rows = masked_actions_in_training(
            make_cfg, tmp_path / f"run{len(extra)}", *MASKED_ENV, *overrides, *extra, "algo.rollout_length=20",
            "envs_per_worker=2", iterations=4,
        )
        return masked, rows[-1]

    masked, last = masked_in_training()
    assert last["agent_steps"] >= 3 * 20 * 2 and np.isfinite(last["picker/loss_value"])
    assert np.isfinite(last["scout/loss_entropy"]) and last["scout/nonfinite_updates"] == 0
    assert masked == 0
    assert masked_in_training("model.action_mask_key=null")[0] > 20


@pytest.mark.parametrize("stochastic", [False, True], ids=["deterministic", "stochastic"])
def test_evaluation_of_a_multi_agent_policy_takes_no_masked_action(stochastic):
    spec = pickers_spec("observations")
    before, steps = MaskedPickers.masked_taken, MaskedPickers.steps_taken
    evaluate_policy(weights_of(spec.build()), policy_spec=spec, env_spec=replace(PICKERS, global_state="observations"),
                    num_episodes=10, seed=3, stochastic=stochastic)
    assert MaskedPickers.steps_taken - steps == 10 * 10 * 3  # every agent acted every step of every episode
    assert MaskedPickers.masked_taken == before


@pytest.mark.slow
def test_validation_probes_agents_with_legal_actions_and_refuses_a_mask_of_the_wrong_width(make_cfg):
    before = MaskedPickers.masked_taken, MaskedPickers.steps_taken
    validate_config(make_cfg(*MASKED_ENV, "algo=mappo"))
    assert MaskedPickers.steps_taken - before[1] >= 15 and MaskedPickers.masked_taken == before[0]
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg("env=pettingzoo", "algo=ippo",
                                 "env.entry_point=tests.multi_agent_envs:MaskedPickersWideMask"))
    problems = [p for p in err.value.problems if "action_mask" in p]
    assert len(problems) == 1 and "\n" not in problems[0], err.value.problems
    assert problems[0].startswith("model: agent scout_0: the observation's 'action_mask' has 3 columns, but the "
                                  "action space has 2 choices"), problems
