"""Q-learning pieces: targets and loss by hand, the numpy ε-greedy copy against the torch Q-network."""

import numpy as np
import pytest
import torch

from rlpar.envs.spaces import ActionInfo
from rlpar.learning.losses.q_targets import q_targets, weighted_huber
from rlpar.models.q_spec import QNetworkSpec


def test_double_q_targets_take_the_online_argmax_and_the_target_value():
    rewards = torch.tensor([1.0, 0.5, -1.0])
    discounts = torch.tensor([0.9, 0.0, 0.81])  # the second transition terminated; the third is 2-step
    next_q_target = torch.tensor([[1.0, 5.0], [7.0, 3.0], [2.0, 4.0]])
    next_q_online = torch.tensor([[3.0, 2.0], [0.0, 1.0], [0.0, 9.0]])
    # online argmax: 0, 1, 1 -> target values 1.0, 3.0, 4.0
    expected = torch.tensor([1.0 + 0.9 * 1.0, 0.5 + 0.0 * 3.0, -1.0 + 0.81 * 4.0])
    torch.testing.assert_close(q_targets(rewards, discounts, next_q_target, next_q_online), expected)
    # classic DQN: the target network's own max, 5.0, 7.0, 4.0
    classic = torch.tensor([1.0 + 0.9 * 5.0, 0.5, -1.0 + 0.81 * 4.0])
    torch.testing.assert_close(q_targets(rewards, discounts, next_q_target), classic)


def test_weighted_huber_is_quadratic_inside_delta_linear_outside_and_weighted():
    td = torch.tensor([0.5, -2.0, 3.0])
    weights = torch.tensor([1.0, 0.5, 2.0])
    expected = (1.0 * 0.125 + 0.5 * (0.5 + 1.0) + 2.0 * (0.5 + 2.0)) / 3
    assert weighted_huber(td, weights).item() == pytest.approx(expected)


@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_q_values_match_torch_and_greedy_acts_on_them(dueling):
    spec = QNetworkSpec(obs_dim=4, action=ActionInfo(discrete=True, size=3), hidden_sizes=(16, 16), dueling=dueling)
    torch.manual_seed(0)
    model = spec.build()
    policy = spec.acting_policy()
    policy.set_weights({**{k: v.numpy() for k, v in model.state_dict().items()}, "epsilon": 0.0})
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    q = model(torch.from_numpy(obs)).detach().numpy()
    np.testing.assert_allclose(policy.q_values(obs), q, rtol=1e-5, atol=1e-6)
    actions, _, values = policy.act(obs, np.random.default_rng(1).random(64))  # epsilon 0: always greedy
    np.testing.assert_array_equal(actions, q.argmax(axis=1))
    np.testing.assert_allclose(values, q.max(axis=1), rtol=1e-5, atol=1e-6)
    if dueling:  # the advantage stream is centred: Q's mean over actions is V(s)
        value = model.value(model.trunk(torch.from_numpy(obs))).squeeze(1).detach().numpy()
        np.testing.assert_allclose(q.mean(axis=1), value, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_each_environment_explores_at_its_own_epsilon():
    """Per-environment ε (Ape-X's per-actor rates): the share of non-greedy actions matches
    ε x (actions - 1) / actions, and exploratory actions are uniform."""
    spec = QNetworkSpec(obs_dim=2, action=ActionInfo(discrete=True, size=4), hidden_sizes=(8,))
    model = spec.build()
    policy = spec.acting_policy(env_ids=[1, 3])  # steps environments 1 and 3 of the run
    epsilons = np.array([0.9, 0.5, 0.7, 0.1])
    policy.set_weights({**{k: v.numpy() for k, v in model.state_dict().items()}, "epsilon": epsilons})
    obs = np.zeros((2, 2), np.float32)
    greedy = policy.q_values(obs).argmax(axis=1)
    rng = np.random.default_rng(2)
    draws = np.array([policy.act(obs, rng.random(2))[0] for _ in range(40_000)])  # [draw, env]
    for column, epsilon in ((0, 0.5), (1, 0.1)):
        non_greedy = (draws[:, column] != greedy[column]).mean()
        assert non_greedy == pytest.approx(epsilon * 3 / 4, abs=0.01)
        counts = np.bincount(draws[:, column], minlength=4) / len(draws)
        expected = np.full(4, epsilon / 4)
        expected[greedy[column]] += 1 - epsilon
        np.testing.assert_allclose(counts, expected, atol=0.01)


def test_a_q_network_refuses_continuous_actions():
    with pytest.raises(ValueError, match="Discrete"):
        QNetworkSpec(obs_dim=3, action=ActionInfo(discrete=False, size=1, low=(-1.0,), high=(1.0,), shape=(1,)))
