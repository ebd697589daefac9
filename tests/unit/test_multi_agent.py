"""Multi-agent environments as rows of agents (rlpar/envs/pettingzoo.py), their policies
(rlpar/models/multi_agent.py) and IPPO/MAPPO (rlpar/algos/mappo.py), with real PettingZoo envs."""

import json

import numpy as np
import pytest
import torch

from rlpar.envs.factory import EnvSpec, make_parallel_env, multi_agent_vector_env
from rlpar.envs.pettingzoo import agent_layout, policy_groups
from rlpar.envs.probe import probe_env
from rlpar.envs.spaces import ActionInfo
from rlpar.models.multi_agent import MultiAgentSpec, policy_weights
from rlpar.models.spec import PolicySpec
from rlpar.sampling.rollout import RolloutWorker

RELAY = EnvSpec(kind="pettingzoo", entry_point="tests.multi_agent_envs:relay")
SPREAD = EnvSpec(kind="pettingzoo", id="mpe2.simple_spread_v3")
SPREAD_AEC = EnvSpec(kind="pettingzoo", entry_point="mpe2.simple_spread_v3:env")  # converted to parallel


def test_simple_spread_columns_are_agents_and_the_team_return_is_their_sum():
    venv = multi_agent_vector_env(SPREAD, 6)  # two environments of three agents
    assert venv.layout.agents == ("agent_0", "agent_1", "agent_2") and venv.layout.policies == ("shared",)
    obs, _ = venv.reset(seed=list(range(6)))
    assert obs.shape == (6, 18)
    again = multi_agent_vector_env(SPREAD, 6)
    np.testing.assert_array_equal(again.reset(seed=list(range(6)))[0], obs)  # seeded per environment
    agent_sums = np.zeros(6)
    rng = np.random.default_rng(0)
    for step in range(25):  # mpe2's default: 25 cycles
        obs, rewards, terminated, truncated, info = venv.step(rng.integers(0, 5, 6))
        assert info["agent_active"].all() and not terminated.any()
        agent_sums += rewards
        assert truncated.all() == (step == 24)
    ended = np.flatnonzero(~np.isnan(info["team_return"]))
    assert list(ended) == [0, 3] and list(info["team_length"][ended]) == [25, 25]
    np.testing.assert_allclose(info["team_return"][ended], [agent_sums[:3].sum(), agent_sums[3:].sum()], rtol=1e-6)
    _, rewards, _, _, info = venv.step(rng.integers(0, 5, 6))  # only resets (next-step autoreset)
    assert not info["agent_active"].any() and not rewards.any()


def test_relay_rows_absent_agents_and_team_episode_by_hand():
    spec = EnvSpec(kind="pettingzoo", entry_point="tests.multi_agent_envs:relay", agent_id=True, global_state="auto")
    venv = multi_agent_vector_env(spec, 3)
    layout = venv.layout
    assert layout.policies == ("scout", "runner") and layout.policy_of == (0, 1, 1)  # auto: spaces differ -> group
    assert layout.actor_inputs == (2 + 1, 3 + 2, 3 + 2) and layout.row_dims == (5, 7, 7) and layout.row_dim == 7
    obs, _ = venv.reset(seed=[4, 5, 6])
    offset = float(np.random.default_rng(4).integers(0, 10))
    np.testing.assert_array_equal(obs[1], [0, 1, offset, 1, 0, 0, offset])  # runner_0: obs, id one-hot, state
    np.testing.assert_array_equal(obs[0], [0, 0, 0, 0, offset, 0, 0])  # the scout has not arrived: only the state
    active, rewards, terminated, truncated = [], [], [], []
    for _ in range(6):
        _, r, te, tr, info = venv.step(np.array([1, 2, 0]))
        active.append(info["agent_active"].copy()), rewards.append(r), terminated.append(te), truncated.append(tr)
    active = np.array(active, int)
    np.testing.assert_array_equal(active, [[0, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(np.array(terminated, int)[:, 2], [0, 1, 0, 0, 0, 0])  # runner_1 leaves
    np.testing.assert_array_equal(np.array(truncated, int)[4], [1, 1, 0])  # the others are cut at step 5
    # the scout acts in steps 2-5 (action 1), runner_0 in 1-5 (2), runner_1 in 1-2 (0): plus step / 100 each
    team = sum(float(np.asarray(r, np.float64).sum()) for r in rewards[:5])
    assert team == pytest.approx(4 + 0.14 + 10 + 0.15 + 0.03, abs=1e-5)


def test_team_return_is_reported_at_the_episode_end():
    venv = multi_agent_vector_env(RELAY, 3)
    venv.reset(seed=[0, 1, 2])
    for step in range(5):
        _, rewards, _, _, info = venv.step(np.array([1, 1, 1]))
    assert info["team_return"][0] == pytest.approx(4 * 1 + 0.14 + 5 * 1 + 0.15 + 2 * 1 + 0.03, abs=1e-5)
    assert info["team_length"][0] == 5 and np.isnan(info["team_return"][1:]).all()


def test_policy_mappings():
    agents = ("speaker_0", "listener_0", "listener_1")
    same = lambda a, b: a[:4] == b[:4]  # noqa: E731 - spaces by name for this test
    assert policy_groups(agents, "group", same) == (("speaker", "listener"), (0, 1, 1))
    assert policy_groups(agents, "agent", same) == (agents, (0, 1, 2))
    assert policy_groups(agents, "auto", same) == (("speaker", "listener"), (0, 1, 1))
    assert policy_groups(agents, {"talk": ["speaker_*"], "hear": ["listener_0", "listener_1"]}, same) == (
        ("talk", "hear"), (0, 1, 1))
    with pytest.raises(ValueError, match="listener_1' matches 2 policies"):
        policy_groups(agents, {"a": ["speaker_0", "listener_*"], "b": ["listener_1"]}, same)
    with pytest.raises(ValueError, match="different spaces"):
        policy_groups(agents, "shared", same)
    with pytest.raises(ValueError, match=r"env.policies: mute \(whisperer_\*\) matches no agent; the agents are speaker_0, "):
        policy_groups(agents, {"talk": ["speaker_*"], "hear": ["listener_*"], "mute": ["whisperer_*"]}, same)
    assert policy_groups(("a_0", "a_1"), "auto", lambda a, b: True) == (("shared",), (0, 0))


def test_a_multi_agent_environment_that_raises_is_rebuilt_and_its_agents_truncated_at_their_last_rows():
    """As RecoveringEnv does for one agent: the failed step ends every live agent's episode as a
    truncation at its last good row, with no reward; the next step resets a rebuilt environment,
    seeded deterministically; an environment that only raises stops the run."""
    from functools import partial

    from mpe2 import simple_spread_v3

    from rlpar.envs.factory import env_restarts
    from rlpar.envs.pettingzoo import MultiAgentVectorEnv
    from rlpar.envs.recovering import RESEED_STRIDE
    from rlpar.errors import EnvironmentFailedError
    from tests.faulty_envs import flaky_simple_spread

    venv = MultiAgentVectorEnv(make=partial(flaky_simple_spread, fail_every=40, N=3, max_cycles=100), name="flaky")
    rows, _ = venv.reset(seed=[7, 7, 7])
    first = venv.envs[0]
    for _ in range(39):
        rows, rewards, terminated, truncated, info = venv.step(np.zeros(3, np.int64))
    assert not truncated.any() and venv.restarts == 0
    cut, rewards, terminated, truncated, info = venv.step(np.zeros(3, np.int64))  # its 40th step raises
    np.testing.assert_array_equal(cut, rows)
    assert truncated.all() and not terminated.any() and not rewards.any() and info["agent_active"].all()
    assert np.isfinite(info["team_return"][0]) and info["team_length"][0] == 40
    assert venv.restarts == env_restarts(venv) == 1 and venv.envs[0] is not first
    fresh, _, _, _, info = venv.step(np.zeros(3, np.int64))  # the rebuilt environment's reset
    assert not info["agent_active"].any()
    expected, _ = simple_spread_v3.parallel_env(N=3, max_cycles=100).reset(seed=7 + RESEED_STRIDE)
    np.testing.assert_array_equal(fresh, np.stack([expected[agent] for agent in venv.layout.agents]))

    broken = MultiAgentVectorEnv(make=partial(flaky_simple_spread, fail_every=1, N=3, max_cycles=100), name="broken")
    broken.reset(seed=[0, 0, 0])
    with pytest.raises(EnvironmentFailedError, match="environment broken raised on 10 steps in a row, rebuilt each time"):
        for _ in range(30):
            broken.step(np.zeros(3, np.int64))
    unstartable = MultiAgentVectorEnv(make=partial(flaky_simple_spread, reset_fails=True), name="unstartable")
    with pytest.raises(EnvironmentFailedError, match="environment unstartable raised on 3 resets in a row, rebuilt each "
                                                     "time; last: RuntimeError: simulator cannot start an episode"):
        unstartable.reset(seed=[0, 0, 0])
    lying = MultiAgentVectorEnv(make=partial(flaky_simple_spread, string_reward_after=5), name="lying")
    lying.reset(seed=[0, 0, 0])
    with pytest.raises(EnvironmentFailedError, match=r"environment lying returned a reward of type str \('-1.5'\); a "
                                                     r"reward must be one real number for agent agent_0 \(at step 5\)"):
        for _ in range(10):
            lying.step(np.zeros(3, np.int64))


def test_aec_environments_are_converted():
    env = make_parallel_env(EnvSpec(kind="pettingzoo", entry_point="tests.multi_agent_envs:relay_aec"))
    assert tuple(env.possible_agents) == ("scout_0", "runner_0", "runner_1")
    assert agent_layout(env).policies == ("scout", "runner")


def multi_agent_spec(env_spec: EnvSpec = RELAY, **layout_options) -> MultiAgentSpec:
    env = make_parallel_env(env_spec)
    layout = agent_layout(env, **layout_options)
    return MultiAgentSpec.from_layout(layout, PolicySpec, hidden_sizes=(8,), normalize_obs=False)


def test_each_row_is_acted_by_its_policy_on_its_own_width():
    spec = multi_agent_spec(agent_id=True)
    torch.manual_seed(0)
    model = spec.build()
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    acting = spec.acting_policy()
    acting.set_weights(weights)
    rows = np.random.default_rng(0).normal(size=(6, spec.obs_dim)).astype(np.float32)
    noise = np.random.default_rng(1).random(6)
    obs, actions, logp, values = acting.act_raw(rows, noise)
    for p, (name, policy) in enumerate(spec.policies):
        own = policy.acting_policy()
        own.set_weights(policy_weights(weights, name))
        mine = spec.rows_of(p, 6)
        assert list(mine) == ([0, 3] if name == "scout" else [1, 2, 4, 5])
        _, a, lp, v = own.act_raw(rows[mine, : policy.obs_dim], noise[mine])
        np.testing.assert_array_equal(actions[mine], a)
        np.testing.assert_array_equal(values[mine], v)
        np.testing.assert_array_equal(logp[mine], lp)
    assert actions[[0, 3]].max() <= 1  # the scout's Discrete(2)


def test_centralised_critic_actor_ignores_the_state_and_value_norm_matches_numpy():
    spec = PolicySpec(obs_dim=7, action=ActionInfo(discrete=True, size=3), actor_inputs=5, value_norm=True,
                      hidden_sizes=(16,))
    model = spec.build()
    model.value_normalizer.update(np.array([-30.0]), np.array([16.0]), 50)
    acting = spec.acting_policy()
    acting.set_weights({k: v.numpy() for k, v in model.state_dict().items()})
    rows = np.random.default_rng(0).normal(size=(4, 7)).astype(np.float32)
    changed = rows.copy()
    changed[:, 5:] += 3.0  # the global state differs, the agents' own rows do not
    logits, values = acting.outputs(rows)
    logits2, values2 = acting.outputs(changed)
    np.testing.assert_allclose(logits, logits2)
    assert not np.allclose(values, values2)
    torch_logits, torch_values = model.towers(torch.from_numpy(rows))
    np.testing.assert_allclose(torch_logits.detach().numpy(), logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(torch_values.detach().numpy(), values, rtol=1e-4, atol=1e-4)
    raw = model.normalised(torch_values)  # the critic's own outputs: values are 4 x those + -30
    np.testing.assert_allclose((raw * 4.0 - 30.0).detach().numpy(), values, rtol=1e-4, atol=1e-3)


def test_worker_marks_absent_agents_invalid_and_records_team_episodes():
    spec = multi_agent_spec()
    worker = RolloutWorker(env_spec=RELAY, policy_spec=spec, num_envs=6, rollout_length=12, seed=0)
    worker.set_weights({k: v.numpy() for k, v in spec.build().state_dict().items()}, 0)
    batch = worker.sample()
    assert batch.obs.shape == (12, 6, spec.obs_dim) and batch.agents_per_env == 3 and batch.num_steps == 24
    # per environment: 5 steps, then the reset step; the scout arrives after the first step, runner_1 leaves after 2
    expected = np.array([[0, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]] * 2)
    np.testing.assert_array_equal(batch.valid[:, :3].astype(int), expected)
    np.testing.assert_array_equal(batch.valid[:, 3:], batch.valid[:, :3])
    assert batch.team_ends == [(4, 0), (4, 3), (10, 0), (10, 3)]
    assert batch.team_lengths == [5, 5, 5, 5]
    # agents' episodes: runner_1 ends at step 1, the others at step 4; the team's return is their sum
    assert batch.episode_ends[:2] == [(1, 2), (1, 5)]
    first_team = [r for (t, c), r in zip(batch.episode_ends, batch.episode_returns) if t <= 4 and c < 3]
    assert batch.team_returns[0] == pytest.approx(sum(first_team))
    assert batch.episode_lengths[:2] == [2, 2]  # runner_1 acted twice


@pytest.mark.parametrize("env_spec", [SPREAD, SPREAD_AEC], ids=["parallel", "aec"])
def test_a_restored_worker_continues_simple_spread_exactly(env_spec):
    """A checkpoint's environments, unpickled, are the saved ones mid-episode: MPE's EzPickle
    alone would rebuild them unreset (`'raw_env' object has no attribute 'agent_selection'`)."""
    spec = multi_agent_spec(env_spec)
    weights = {k: v.numpy() for k, v in spec.build().state_dict().items()}
    workers = [RolloutWorker(env_spec=env_spec, policy_spec=spec, num_envs=6, rollout_length=10, seed=0) for _ in range(2)]
    for worker in workers:
        worker.set_weights(weights, 0)
    workers[0].sample()  # 10 of an episode's 25 cycles
    workers[1].set_state(workers[0].get_state())
    continued, restored = workers[0].sample(), workers[1].sample()
    for name in ("obs", "actions", "rewards", "valid", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(continued, name), err_msg=name)
    for worker in workers:
        worker.close()


def test_the_probe_finds_environments_whose_state_cannot_be_checkpointed():
    assert probe_env(SPREAD).state_problem is None
    assert probe_env(SPREAD_AEC).state_problem is None
    local_class = probe_env(EnvSpec(kind="pettingzoo", entry_point="tests.multi_agent_envs:rendezvous"))
    assert local_class.problem is None and local_class.step_problem is None
    assert "Can't pickle local object 'rendezvous.<locals>.Rendezvous'" in local_class.state_problem


def test_batch_columns_keep_a_policys_agents_and_renumber_their_episodes():
    spec = multi_agent_spec()
    worker = RolloutWorker(env_spec=RELAY, policy_spec=spec, num_envs=6, rollout_length=12, seed=0)
    worker.set_weights({k: v.numpy() for k, v in spec.build().state_dict().items()}, 0)
    batch = worker.sample()
    runners = spec.rows_of(1, 6)
    part = batch.columns(runners, obs_width=3)
    assert part.obs.shape == (12, 4, 3) and part.num_steps == 48
    np.testing.assert_array_equal(part.obs, batch.obs[:, runners, :3])
    np.testing.assert_array_equal(part.env_ids, batch.env_ids[runners])
    position = {int(c): i for i, c in enumerate(runners)}
    expected = [((t, position[c]), r) for (t, c), r in zip(batch.episode_ends, batch.episode_returns) if c in position]
    assert list(zip(part.episode_ends, part.episode_returns)) == expected and len(expected) == 8


@pytest.mark.parametrize(("overrides", "message"), [
    (("env=pettingzoo",), "env=pettingzoo: algo=ppo learns single-agent environments; use algo=ippo or mappo"),
    (("algo=mappo",), "algo=mappo learns multi-agent PettingZoo environments; use env=pettingzoo"),
    (("env=pettingzoo", "algo=ippo", "env.policies=shared", "env.entry_point=tests.multi_agent_envs:relay"),
     "env.policies: policy 'shared' covers agents with different spaces (scout_0 and runner_0)"),
    (("env=pettingzoo", "algo=mappo", "env.global_state=state", "env.entry_point=tests.multi_agent_envs:Together"),
     "env.global_state=state: the environment has no state() and state_space"),
    (("env=pettingzoo", "algo=ippo", "env.id=no_such_module_v1"), "env: building env.id no_such_module_v1"),
    (("env=pettingzoo", "algo=mappo", "model.recurrent=lstm"), "model.recurrent: algo=mappo learns feed-forward"),
    (("env=pettingzoo", "algo=mappo", "env.policies={x.y: [agent_*]}"),
     "env.policies: policy name 'x.y' must be a name without dots (it names the policy's weights, policies.<name>.*, "
     "and its metrics), for example 'x_y'"),
    (("env=pettingzoo", "algo=mappo", "env.policies={a: [agent_*], b: [adversary_*], c: [x, y]}"),
     "env.policies: b (adversary_*) and c (x, y) match no agent; the agents are agent_0, agent_1, agent_2"),
])
def test_multi_agent_config_problems_in_one_line(make_cfg, tmp_path, overrides, message):
    from rlpar.config.validate import ConfigError, validate_config

    cfg = make_cfg(*overrides, run_dir=tmp_path)
    with pytest.raises(ConfigError) as caught:
        validate_config(cfg)
    assert any(message in problem for problem in caught.value.problems)  # within one line


def test_ippo_run_logs_team_agent_and_policy_metrics(make_cfg, tmp_path):
    from rlpar.runtime.build import build_trainer

    from rlpar.report import write_report

    cfg = make_cfg("env=pettingzoo", "algo=ippo", "env.entry_point=tests.multi_agent_envs:relay", "algo.rollout_length=12",
                   "envs_per_worker=2", "checkpoint.every=0", "total_steps=72", run_dir=tmp_path)
    trainer = build_trainer(cfg)
    try:
        rows = [trainer.train() for _ in range(3)]
        state = trainer.algorithm.state_dict()
    finally:
        trainer.close()
    report = write_report(tmp_path).read_text()
    for policy in ("scout", "runner"):  # each policy's agents' return beside the team's, in the report
        assert f"| {policy} | {rows[-1][f'{policy}/agent_return_mean']:.2f} | {rows[-1]['team_return_mean']:.2f} | 72 |" in report
    last = rows[-1]
    assert last["env_steps"] == 3 * 12 * 2  # environment steps, not agent steps
    assert last["agent_steps"] == 12 * 2 * 3
    assert last["team_length_mean"] == 5 and last["episodes"] == 3 * 2 * 2  # team episodes: 2 an environment
    for policy in ("scout", "runner"):
        assert np.isfinite(last[f"{policy}/loss_value"]) and f"{policy}/agent_return_mean" in last
        assert state["policies"][policy]["version"] == 3
    assert set(state["policies"]) == {"scout", "runner"}
    logged = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert logged["team_return_mean"] == last["team_return_mean"]


def test_speaker_listener_validates_with_a_policy_per_group(make_cfg, tmp_path):
    """Agents with different spaces (a speaker with 3 actions, a listener with 5) are probed with
    actions from their own spaces, and `env.policies=auto` gives each group its policy."""
    from rlpar.config.validate import validate_config

    probe = validate_config(make_cfg("env=pettingzoo", "algo=mappo",
                                     "env.entry_point=mpe2.simple_speaker_listener_v4:parallel_env", run_dir=tmp_path))
    assert probe.step_problem is None and probe.agents.policies == ("speaker", "listener")
    assert probe.agents.row_dims == (3 + 14, 11 + 14)  # own observation, then the 14-value state


def test_dashboard_tags_group_each_policys_metrics_under_its_name():
    from rlpar.logging.tags import tag_for

    assert tag_for("speaker/loss_policy") == "speaker/losses/loss_policy"
    assert tag_for("team_return_mean") == "returns/team_return_mean"
    assert tag_for("shared/agent_return_mean") == "shared/returns/agent_return_mean"


def test_ppos_keys_are_ippos_and_typos_are_named(make_cfg, tmp_path):
    from rlpar.config.validate import ConfigError, validate_config

    with pytest.raises(ConfigError) as caught:
        validate_config(make_cfg("env=pettingzoo", "algo=ippo", "+algo.minibatch_size=64", "algo.minibatches=0",
                                 "+algo.entropy_coeff=0.1", run_dir=tmp_path))
    message = str(caught.value)
    assert "algo.minibatch_size: unknown key" in message and "algo.minibatches: 0" in message
    assert "algo.entropy_coeff: unknown key" in message and "did you mean algo.entropy_coef?" in message
