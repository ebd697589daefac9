"""PPO's optional knobs, through the public update() on a real CartPole batch."""

import numpy as np
import pytest
import torch

from rlpar.algos.ppo import PPO, PPOLearner
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.losses.ppo_loss import value_loss
from tests.rollouts import LEARNER_ONLY, cartpole_rollout, made

GAMMA, GAE_LAMBDA = 0.99, 0.95
WHOLE_BATCH = 10_000  # minibatch_size above the batch size: one gradient step per epoch


def make_ppo(policy_spec, **options):
    """Every PPO of a test starts from the same weights (seed 0), those the batch was acted with."""
    options = {"total_steps": 100_000, "gamma": GAMMA, "gae_lambda": GAE_LAMBDA, **options}
    return made(PPO, sampler=LEARNER_ONLY, policy_spec=policy_spec, seed=0, **options)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """As runs do (hardware.torch_threads: 1): tiny MLPs are fastest on one thread, and far
    slower on several when the machine is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def rollout():
    """(policy spec, batch): 4 CartPole environments for 32 steps, episode ends included."""
    return cartpole_rollout(make_ppo)


def initial_value_loss(batch, reward_scale=1.0):
    """0.5 * mean squared error of the acting values against the (scaled) GAE returns, over the
    valid steps: the value loss of the first gradient step, taken before the weights move."""
    _, returns = compute_gae(
        rewards=batch.rewards * reward_scale, values=batch.values, bootstrap_value=batch.bootstrap_value,
        terminated=batch.terminated, truncated=batch.truncated, valid=batch.valid,
        gamma=GAMMA, gae_lambda=GAE_LAMBDA,
    )
    errors = (batch.values - returns)[batch.valid]
    return 0.5 * float(np.mean(errors.astype(np.float64) ** 2))


def test_tiny_target_kl_stops_after_the_first_epoch(rollout):
    policy_spec, batch = rollout
    full = make_ppo(policy_spec, epochs=8, minibatch_size=32).update(batch)
    early = make_ppo(policy_spec, epochs=8, minibatch_size=32, target_kl=1e-12).update(batch)
    loose = make_ppo(policy_spec, epochs=8, minibatch_size=32, target_kl=1e9).update(batch)
    assert full["epochs"] == loose["epochs"] == 8
    assert early["epochs"] == 1
    assert early["gradient_steps"] == full["gradient_steps"] // 8


@pytest.mark.parametrize("min_lr_fraction, fractions", [(0.3, [0.75, 0.5, 0.3, 0.3, 0.3]), (0.0, [0.75, 0.5, 0.25, 0.0, 0.0])])
def test_annealed_lr_decays_linearly_with_steps_seen_down_to_its_floor(rollout, min_lr_fraction, fractions):
    policy_spec, batch = rollout
    ppo = make_ppo(policy_spec, lr=1e-3, anneal_lr=True, min_lr_fraction=min_lr_fraction,
                   total_steps=4 * batch.num_steps, epochs=1, minibatch_size=WHOLE_BATCH)
    for expected in fractions:
        stats = ppo.update(batch)
        assert stats["lr"] == pytest.approx(1e-3 * expected, abs=1e-15)
        assert ppo.state_dict()["optimizer"]["param_groups"][0]["lr"] == stats["lr"]  # the optimiser really uses it


def test_lr_stays_constant_without_annealing(rollout):
    policy_spec, batch = rollout
    ppo = make_ppo(policy_spec, lr=1e-3, total_steps=batch.num_steps, epochs=1, minibatch_size=WHOLE_BATCH)
    for _ in range(3):
        assert ppo.update(batch)["lr"] == 1e-3
    assert ppo.state_dict()["optimizer"]["param_groups"][0]["lr"] == 1e-3


@pytest.mark.parametrize("reward_scale", [1.0, 10.0])
def test_reward_scale_scales_the_value_targets(rollout, reward_scale):
    policy_spec, batch = rollout
    stats = make_ppo(policy_spec, reward_scale=reward_scale, epochs=1, minibatch_size=WHOLE_BATCH).update(batch)
    assert stats["loss_value"] == pytest.approx(initial_value_loss(batch, reward_scale), rel=1e-4)
    # the two scales are far apart, so the check above cannot pass with the wrong one
    assert initial_value_loss(batch, 10.0) > 10 * initial_value_loss(batch, 1.0)


def test_value_clip_keeps_the_pessimistic_value_loss(rollout):
    """With a tiny clip the clipped prediction stays at the acting value, and the loss keeps the
    larger of the two errors: it cannot fall below the first step's loss, which plain training
    (same batch, same steps) clearly improves on. A clip too wide to bind changes nothing."""
    policy_spec, batch = rollout
    train = lambda **clip: make_ppo(policy_spec, lr=1e-2, epochs=6, minibatch_size=WHOLE_BATCH, **clip).update(batch)
    first_step = initial_value_loss(batch)
    plain, tight, wide = train(value_clip=None), train(value_clip=1e-8), train(value_clip=1e6)
    assert plain["loss_value"] < 0.95 * first_step
    assert tight["loss_value"] >= first_step * (1 - 1e-5)
    assert wide["loss_value"] == pytest.approx(plain["loss_value"], rel=1e-6)
    # the clip range is centred on the acting values: on the first step, before the weights move,
    # the clipped prediction is the acting value itself and the loss is exactly the first step's
    one_step = make_ppo(policy_spec, epochs=1, minibatch_size=WHOLE_BATCH, value_clip=1e-8).update(batch)
    assert one_step["loss_value"] == pytest.approx(first_step, rel=1e-4)


def test_value_clip_range_is_centred_on_the_old_value():
    # old value 5, target 6, new value 6.2: the clipped prediction 5.5 errs more (0.5 vs 0.2),
    # and the pessimistic loss keeps that error
    loss = value_loss(torch.tensor([6.2]), torch.tensor([6.0]), torch.tensor([5.0]), 0.5)
    assert loss.item() == pytest.approx(0.5 * 0.5**2, rel=1e-5)
    assert value_loss(torch.tensor([6.2]), torch.tensor([6.0]), torch.tensor([5.0]), None).item() == pytest.approx(0.5 * 0.2**2, rel=1e-5)


class RecordingPPOLearner(PPOLearner):
    """PPO's learner that keeps what its update optimises on (the inputs after GAE and any decoupling)."""

    def optimise(self, data: dict, inputs: dict | None = None) -> dict:
        self.optimised = {k: v.clone() for k, v in data.items()}
        return super().optimise(data, inputs)


class RecordingPPO(PPO):
    """PPO whose learner records (its `optimised`, read through the algorithm)."""

    learner_class = RecordingPPOLearner


def test_an_on_policy_batch_keeps_its_behaviour_log_probabilities(rollout):
    spec, batch = rollout
    ppo = made(RecordingPPO, sampler=LEARNER_ONLY, policy_spec=spec, seed=0, total_steps=100_000, minibatch_size=WHOLE_BATCH)
    ppo.update(batch.copy())
    valid = batch.valid.reshape(-1)
    np.testing.assert_array_equal(ppo.optimised["old_logp"].numpy(), batch.logp.reshape(-1)[valid])
    assert torch.equal(ppo.optimised["behaviour_weights"], torch.ones(int(valid.sum())))


def test_a_lagged_batch_is_clipped_around_the_current_policy_and_reweighted(rollout):
    """non_blocking: a batch acted one update ago is learnt from as decoupled PPO does (Hilton et
    al. 2021): the ratio is clipped around the current policy, and each sample's advantage is
    weighted by pi_current / pi_behaviour."""
    spec, batch = rollout
    ppo = made(RecordingPPO, sampler=LEARNER_ONLY, policy_spec=spec, seed=0, total_steps=100_000, minibatch_size=WHOLE_BATCH)
    ppo.update(batch.copy())  # the weights move on; the same batch is now one version old
    assert batch.policy_version == 0 and ppo.version == 1
    valid = batch.valid.reshape(-1)
    obs = torch.as_tensor(batch.obs.reshape(-1, batch.obs.shape[-1])[valid])
    actions = torch.as_tensor(batch.actions.reshape(-1)[valid])
    with torch.no_grad():
        current = ppo.model.evaluate_actions(obs, actions, with_entropy=False)[0]
    behaviour = torch.as_tensor(batch.logp.reshape(-1)[valid])
    ppo.update(batch.copy())
    np.testing.assert_allclose(ppo.optimised["old_logp"].numpy(), current.numpy(), rtol=1e-6)
    weights = ppo.optimised["behaviour_weights"].numpy()
    np.testing.assert_allclose(weights, (current - behaviour).exp().numpy(), rtol=1e-5)
    assert np.abs(weights - 1.0).max() > 1e-3  # the policy did move: the weights are not all 1
