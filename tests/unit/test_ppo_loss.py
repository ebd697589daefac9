import math

import pytest
import torch

from rlpar.learning.losses.ppo_loss import approx_kl, clip_fraction, clipped_policy_loss, normalize, value_loss
from tests.rollouts import LEARNER_ONLY, made


def test_clipped_policy_loss_clips_positive_advantage_above_one_plus_clip():
    logp = torch.log(torch.tensor([1.5]))  # ratio 1.5
    loss = clipped_policy_loss(logp, torch.zeros(1), torch.tensor([2.0]), clip=0.2)
    assert loss.item() == pytest.approx(-1.2 * 2.0)
    assert clip_fraction(logp, torch.zeros(1), 0.2).item() == 1.0


def test_clipped_policy_loss_keeps_pessimistic_term_for_negative_advantage():
    logp = torch.log(torch.tensor([1.5]))
    loss = clipped_policy_loss(logp, torch.zeros(1), torch.tensor([-1.0]), clip=0.2)
    assert loss.item() == pytest.approx(1.5)  # min(1.5 * -1, 1.2 * -1) = -1.5


def test_clipped_policy_loss_unclipped_inside_trust_region():
    logp = torch.log(torch.tensor([1.1, 0.9]))
    loss = clipped_policy_loss(logp, torch.zeros(2), torch.tensor([1.0, 1.0]), clip=0.2)
    assert loss.item() == pytest.approx(-1.0)
    assert clip_fraction(logp, torch.zeros(2), 0.2).item() == 0.0


def test_value_loss_plain_and_clipped():
    values, returns, old = torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([0.0])
    assert value_loss(values, returns, old, None).item() == pytest.approx(2.0)
    # clipped value 0.5 is closer to the target, but the pessimistic max keeps the unclipped error
    assert value_loss(values, returns, old, 0.5).item() == pytest.approx(2.0)
    values = torch.tensor([-0.2])
    returns = torch.tensor([1.0])
    assert value_loss(values, returns, old, 0.1).item() == pytest.approx(0.5 * 1.2**2)


def test_approx_kl_zero_for_identical_and_positive_otherwise():
    old = torch.log(torch.tensor([0.5, 0.5]))
    assert approx_kl(old, old).item() == pytest.approx(0.0)
    new = torch.log(torch.tensor([0.9, 0.1]))
    kl = approx_kl(new, old).item()
    ratio = torch.tensor([1.8, 0.2])
    assert kl == pytest.approx(((ratio - 1) - ratio.log()).mean().item())
    assert kl > 0


def test_normalize_zero_mean_unit_std():
    x = normalize(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert x.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert x.std().item() == pytest.approx(1.0, abs=1e-4)
    assert math.isfinite(normalize(torch.tensor([5.0])).item())


def test_non_finite_updates_are_skipped_counted_and_stop_the_run_when_they_repeat():
    from rlpar.envs.spaces import ActionInfo
    from rlpar.learning.errors import NonFiniteLossError
    from rlpar.algos.ppo import PPO
    from rlpar.models.spec import PolicySpec

    learner = made(PPO, sampler=LEARNER_ONLY, policy_spec=PolicySpec(obs_dim=4, action=ActionInfo(True, 2)), total_steps=1, seed=0,
                  epochs=1, minibatch_size=8, max_consecutive_nonfinite=3)
    n = 8
    good = dict(obs=torch.randn(n, 4), actions=torch.randint(0, 2, (n,)), old_logp=torch.full((n,), -0.7),
                old_values=torch.zeros(n), advantages=torch.randn(n), returns=torch.randn(n))
    bad = {**good, "returns": torch.full((n,), float("nan"))}
    before = [p.detach().clone() for p in learner.parameters]
    stats = learner.optimise(bad)
    assert stats["nonfinite_updates"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, learner.parameters))  # weights untouched
    learner.optimise(good)
    assert learner.step.consecutive_nonfinite == 0 and not all(torch.equal(a, b) for a, b in zip(before, learner.parameters))
    for _ in range(3):
        learner.optimise(bad)
    with pytest.raises(NonFiniteLossError, match="non-finite"):
        learner.optimise(bad)
