"""Both policy heads: the numpy acting copy agrees with the torch learner module."""

import dataclasses

import numpy as np
import pytest
import torch

from rlpar.envs.spaces import ActionInfo, ActionMapper
from rlpar.models.acting.numpy_policy import NumpyPolicy
from rlpar.models.spec import PolicySpec
from tests.rollouts import LEARNER_ONLY, made

DISCRETE = PolicySpec(obs_dim=4, action=ActionInfo(discrete=True, size=3))
CONTINUOUS = PolicySpec(
    obs_dim=3, action=ActionInfo(discrete=False, size=2, low=(-2.0, 0.0), high=(2.0, 1.0), shape=(2,)), init_log_std=-0.5
)


def pair(spec):
    torch.manual_seed(0)
    model = spec.build()
    for p in model.parameters():  # move away from the near-zero output init
        p.data.add_(0.3 * torch.randn_like(p))
    policy = NumpyPolicy(spec)
    policy.set_weights({k: v.numpy() for k, v in model.state_dict().items()})
    return model, policy


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS, dataclasses.replace(DISCRETE, activation="relu")],
                         ids=["categorical", "gaussian", "relu"])
def test_numpy_log_probs_and_values_match_torch(spec):
    model, policy = pair(spec)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(32, spec.obs_dim)).astype(np.float32)
    noise = rng.random(32) if spec.action.discrete else rng.standard_normal((32, spec.action.size)).astype(np.float32)
    actions, logp, values = policy.act(obs, noise)
    t_logp, entropy, t_values = model.evaluate_actions(torch.from_numpy(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(logp, t_logp.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values, t_values.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert (entropy > 0).all() if spec.action.discrete else torch.isfinite(entropy).all()


def test_categorical_sampling_follows_probabilities():
    model, policy = pair(DISCRETE)
    obs = np.tile(np.array([[0.3, -0.2, 0.1, 0.5]], np.float32), (20000, 1))
    actions, _, _ = policy.act(obs, np.random.default_rng(2).random(len(obs)))
    probs = torch.softmax(model.towers(torch.from_numpy(obs[:1]))[0], -1).detach().numpy()[0]
    freq = np.bincount(actions, minlength=3) / len(actions)
    np.testing.assert_allclose(freq, probs, atol=0.015)
    greedy, _, _ = policy.act(obs[:1], None)
    assert greedy[0] == probs.argmax()


def test_gaussian_sampling_uses_mean_and_std():
    model, policy = pair(CONTINUOUS)
    obs = np.zeros((20000, 3), np.float32)
    actions, _, _ = policy.act(obs, np.random.default_rng(3).standard_normal((20000, 2)).astype(np.float32))
    mean = model.towers(torch.zeros(1, 3))[0].detach().numpy()[0]
    np.testing.assert_allclose(actions.mean(0), mean, atol=0.02)
    np.testing.assert_allclose(actions.std(0), model.log_std.exp().detach().numpy(), rtol=0.03)
    greedy, _, _ = policy.act(obs[:1], None)
    np.testing.assert_allclose(greedy[0], mean, rtol=1e-5)


def test_continuous_actions_are_mapped_to_bounds():
    mapper = ActionMapper(CONTINUOUS.action)
    out = mapper.to_env(np.array([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [5.0, -5.0]], np.float32))
    np.testing.assert_allclose(out, [[-2.0, 0.0], [0.0, 0.5], [2.0, 1.0], [2.0, 0.0]])
    assert out.dtype == np.float32


def test_discrete_actions_respect_space_start():
    mapper = ActionMapper(ActionInfo(discrete=True, size=3, start=-1))
    np.testing.assert_array_equal(mapper.to_env(np.array([0, 1, 2])), [-1, 0, 1])


def test_value_head_padding_never_changes():
    """The critic's last layer is padded to the actor's width; training must leave the padding alone."""
    from rlpar.algos.ppo import PPO

    learner = made(PPO, sampler=LEARNER_ONLY, policy_spec=DISCRETE, total_steps=1, seed=0, minibatch_size=16, epochs=2)
    n = 64
    data = dict(
        obs=torch.randn(n, 4),
        actions=torch.randint(0, 3, (n,)),
        old_logp=torch.full((n,), -1.1),
        old_values=torch.zeros(n),
        advantages=torch.randn(n),
        returns=torch.randn(n),
    )
    before = learner.model.weights[-1].detach().clone()
    learner.optimise(data)
    after = learner.model.weights[-1].detach()
    assert torch.equal(after[1, :, 1:], before[1, :, 1:])
    assert not torch.equal(after[1, :, 0], before[1, :, 0])
    assert not torch.equal(after[0], before[0])
