"""A2C: its loss against values worked out by hand and with numpy, its options, exact resume,
the same numbers on every sampler, and learning CartPole with its preset."""

import math

import numpy as np
import pytest
import torch

from rlpar.algos.a2c import A2C
from rlpar.learning.losses.ppo_loss import policy_gradient_loss
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.estimators.nstep import compute_nstep_returns
from rlpar.runtime.build import build_trainer
from tests.rollouts import LEARNER_ONLY, cartpole_rollout, made

GAMMA = 0.99


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """As runs do (hardware.torch_threads: 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_a2c(policy_spec, **options):
    """Every A2C of a test starts from the same weights (seed 0), those the batch was acted with."""
    return made(A2C, sampler=LEARNER_ONLY, policy_spec=policy_spec, total_steps=100_000, seed=0, gamma=GAMMA, **options)


@pytest.fixture(scope="module")
def rollout():
    """(policy spec, batch): 4 CartPole environments for 32 steps, episode ends included."""
    return cartpole_rollout(make_a2c)


def test_policy_gradient_loss_on_hand_values():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    advantages = torch.tensor([3.0, -1.0, 0.0], requires_grad=True)
    loss = policy_gradient_loss(logp, advantages)
    assert loss.item() == pytest.approx(-(-1.0 * 3.0 + -2.0 * -1.0 + 0.0) / 3)  # = 1/3
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-1.0, 1 / 3, 0.0])  # -advantage / batch size
    assert advantages.grad is None  # advantages are constants: no gradient into the critic's targets


def expected_losses(batch, advantages, returns, normalize=False):
    """The first (and only) gradient step's losses from the acting log-probabilities and values,
    which the learner reproduces before its weights move; valid steps only."""
    keep = batch.valid
    adv = advantages[keep].astype(np.float64)
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    policy = -np.mean(batch.logp[keep] * adv)
    value = 0.5 * np.mean((batch.values[keep] - returns[keep]) ** 2.0)
    return policy, value


def estimator_inputs(batch):
    return dict(rewards=batch.rewards, values=batch.values, bootstrap_value=batch.bootstrap_value,
                terminated=batch.terminated, truncated=batch.truncated, valid=batch.valid, gamma=GAMMA)


@pytest.mark.parametrize("options, estimate", [
    ({}, lambda b: compute_nstep_returns(**estimator_inputs(b), n_steps=32)),  # n_steps null: whole rollout
    ({"n_steps": 3}, lambda b: compute_nstep_returns(**estimator_inputs(b), n_steps=3)),
    ({"advantage": "gae", "gae_lambda": 0.7}, lambda b: compute_gae(**estimator_inputs(b), gae_lambda=0.7)),
])
@pytest.mark.slow
@pytest.mark.parametrize("normalize", [False, True])
def test_update_reports_the_loss_of_its_advantages(rollout, options, estimate, normalize):
    policy_spec, batch = rollout
    stats = make_a2c(policy_spec, normalize_advantages=normalize, **options).update(batch)
    advantages, returns = estimate(batch)
    policy, value = expected_losses(batch, advantages, returns, normalize)
    assert stats["loss_policy"] == pytest.approx(policy, rel=1e-4, abs=1e-5)
    assert stats["loss_value"] == pytest.approx(value, rel=1e-4)
    assert stats["loss_entropy"] == pytest.approx(math.log(2), abs=1e-3)  # near-uniform initial policy
    assert stats["gradient_steps"] == 1 and stats["policy_version"] == 1


@pytest.mark.slow
def test_options_change_the_step(rollout):
    """Each knob reaches the update: entropy bonus, value weight, optimiser, reward scale."""
    policy_spec, batch = rollout

    def weights_after(**options):
        a2c = make_a2c(policy_spec, **options)
        a2c.update(batch)
        return np.concatenate([w.ravel() for w in a2c.get_weights().values()])

    base = weights_after(entropy_coef=0.0)
    for options in ({"entropy_coef": 0.1}, {"entropy_coef": 0.0, "value_coef": 2.0},
                    {"entropy_coef": 0.0, "optimizer": "adam"}, {"entropy_coef": 0.0, "reward_scale": 0.1}):
        assert not np.allclose(weights_after(**options), base), options
    assert np.array_equal(weights_after(entropy_coef=0.0), base)  # and the same options, the same step


@pytest.mark.slow
def test_optimizer_key_chooses_rmsprop_or_adam(rollout):
    policy_spec, _ = rollout
    rmsprop = make_a2c(policy_spec, lr=1e-3, rmsprop_alpha=0.9, optimizer_eps=1e-4).optimizer
    assert isinstance(rmsprop, torch.optim.RMSprop)
    group = rmsprop.param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"]) == (1e-3, 0.9, 1e-4)
    assert isinstance(make_a2c(policy_spec, optimizer="adam").optimizer, torch.optim.Adam)
    with pytest.raises(ValueError, match="optimizer"):
        make_a2c(policy_spec, optimizer="sgd")
    with pytest.raises(ValueError, match="advantage"):
        make_a2c(policy_spec, advantage="td")


def test_annealed_lr_reaches_the_rmsprop_optimiser(rollout):
    policy_spec, batch = rollout
    a2c = made(A2C, sampler=LEARNER_ONLY, policy_spec=policy_spec, total_steps=4 * batch.num_steps, seed=0, lr=1e-3, anneal_lr=True)
    for expected in (0.75, 0.5, 0.25, 0.0):
        stats = a2c.update(batch)
        assert stats["lr"] == pytest.approx(1e-3 * expected, abs=1e-15)
        assert a2c.optimizer.param_groups[0]["lr"] == stats["lr"]


LOSSES = ("env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value", "loss_entropy")


def metric_rows(trainer, iterations):
    return [{k: m[k] for k in LOSSES} for m in (trainer.train() for _ in range(iterations))]


def resumed_against_uninterrupted(make_cfg, tmp_path, algo: str) -> tuple[list, list]:
    """(3 rows after a checkpoint at iteration 4, the same 3 rows from a run resumed there)."""
    common = (f"algo={algo}", "checkpoint.every=0")
    trainer = build_trainer(make_cfg(*common, run_dir=tmp_path / "a"))
    try:
        metric_rows(trainer, 4)
        path = trainer.save()
        after = metric_rows(trainer, 3)
    finally:
        trainer.close()
    resumed = build_trainer(make_cfg(*common, "seed=7", run_dir=tmp_path / "b"))
    try:
        resumed.restore(path)
        return after, metric_rows(resumed, 3)
    finally:
        resumed.close()


def test_resume_continues_exactly(make_cfg, tmp_path):
    """The RMSprop state goes through a checkpoint (weights_only load, checksums) and back."""
    after, resumed = resumed_against_uninterrupted(make_cfg, tmp_path, "a2c")
    assert resumed == after


@pytest.mark.slow
def test_multiprocess_matches_local_iteration_after_iteration(make_cfg, tmp_path):
    """sync_mode=blocking: 8 environments in one process or over 4 workers give the same rows,
    losses included, iteration after iteration (episodes end in several of them)."""
    rows = {}
    for name, overrides in (("local", ("workers=1", "envs_per_worker=8")),
                            ("mp", ("parallel=multiprocess", "workers=4", "envs_per_worker=2"))):
        trainer = build_trainer(make_cfg("algo=a2c", "seed=3", "parallel.sync_mode=blocking", *overrides,
                                         run_dir=tmp_path / name))
        try:
            rows[name] = metric_rows(trainer, 30)
        finally:
            trainer.close()
    assert rows["local"][-1]["episodes"] > 10
    assert rows["local"] == rows["mp"]


@pytest.mark.slow
def test_preset_solves_cartpole(make_cfg, tmp_path):
    """`algo=a2c` on CartPole (its preset): seeds 0-9 reached a 20-episode mean of 475 at
    26k-54k env steps in tuning; the default seed must within the preset's 100k."""
    trainer = build_trainer(make_cfg("algo=a2c", run_dir=tmp_path / "learn"))
    best = 0.0
    try:
        while not trainer.done and best < 475:
            best = max(best, trainer.train()["episode_return_mean"] or 0.0)
    finally:
        trainer.close()
    assert best >= 475, f"best 20-episode mean {best} in {trainer.env_steps} env steps"
