"""IMPALA and APPO: they learn, their actors run ahead of the learner, their state resumes."""

import json

import pytest

from rlpar.runtime.build import build_trainer
from rlpar.runtime.run import run


def first_reaching(run_dir, threshold: float) -> int | None:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next((r["env_steps"] for r in rows if (r["episode_return_mean"] or 0) >= threshold), None)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "appo"])
def test_learns_cartpole_in_a_small_budget(make_cfg, tmp_path, algo):
    """Local sampling: synchronous, lag 0. CartPole's preset of each algorithm."""
    run_dir = tmp_path / algo
    run(make_cfg(f"algo={algo}", "total_steps=150000", "checkpoint.every=0", run_dir=run_dir))
    reached = first_reaching(run_dir, 400)
    assert reached is not None and reached <= 150_000


def test_impala_actors_sample_ahead_of_the_learner_when_asked(make_cfg, tmp_path):
    """multiprocess, sync_mode non_blocking: no batch dropped however stale (IMPALA corrects for
    lag instead), lag recorded, the learner's wait for data reported."""
    trainer = build_trainer(make_cfg("algo=impala", "parallel=multiprocess", "workers=2", "total_steps=100000",
                                     "parallel.sync_mode=non_blocking", "checkpoint.every=0", run_dir=tmp_path / "mp"))
    try:
        assert trainer.sampler.sync_mode == "non_blocking" and trainer.sampler.max_policy_lag is None
        rows = [trainer.train() for _ in range(30)]
    finally:
        trainer.close()
    assert max(r["policy_lag_max"] for r in rows) >= 1  # the actors did act with stale weights
    assert all(r["dropped_batches"] == 0 for r in rows)
    # how off-policy each batch was: nothing but float rounding when every rollout acted with the
    # learner's weights, more once some did not
    assert all(r["offpolicy_log_ratio"] < 1e-4 for r in rows if r["policy_lag_max"] == 0)
    assert max(r["offpolicy_log_ratio"] for r in rows if r["policy_lag_max"] >= 1) > 1e-4
    assert all(0.0 <= r["offpolicy_clip_fraction"] <= 1.0 for r in rows)
    assert all(0.0 <= r["learner_wait_fraction"] <= 1.0 and 0.0 <= r["actor_idle_fraction"] < 1.0 for r in rows)


@pytest.mark.parametrize("algo", ["impala", "appo"])
def test_impala_and_appo_sample_in_blocking_rounds_by_default(make_cfg, tmp_path, algo):
    """Both learn a pass of minibatches per batch, which lagging data undoes: overlap is opt-in."""
    trainer = build_trainer(make_cfg(f"algo={algo}", "parallel=multiprocess", "workers=2", run_dir=tmp_path / "a"))
    try:
        assert trainer.sampler.sync_mode == "blocking"
        row = trainer.train()
        # IMPALA's targets come from the learner's own weights, APPO's from its target network
        assert row["policy_lag_max"] == 0 and row["offpolicy_log_ratio"] < (1e-4 if algo == "impala" else 0.05)
    finally:
        trainer.close()


def test_appo_passes_take_each_older_batch_once_then_the_new_one_for_its_epochs(make_cfg, tmp_path):
    """APPOLearner.passes: the buffer's older batches still in use, oldest first, one pass each,
    then `epochs` passes over the new batch; a batch leaves after reuse_per_batch updates."""
    trainer = build_trainer(make_cfg("algo=appo", "algo.reuse_per_batch=2", "algo.buffer_batches=4", run_dir=tmp_path / "a"))
    try:
        learner = trainer.algorithm.learner
        batches = [{"name": n} for n in "abc"]
        plans = [[(data["name"], count) for data, count in learner.passes(data, 3)] for data in batches]
        assert plans == [[("a", 3)], [("a", 1), ("b", 3)], [("b", 1), ("c", 3)]]
        assert [entry[0]["name"] for entry in learner.buffer] == ["c"]
    finally:
        trainer.close()


def test_appo_publishing_after_more_epochs_than_it_takes_is_refused(make_cfg):
    from rlpar.config.validate import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"algo.publish_after_epochs: 3 is more than algo.epochs \(2\)"):
        validate_config(make_cfg("algo=appo", "algo.epochs=2", "algo.publish_after_epochs=3"), check_env=False)
    validate_config(make_cfg("algo=appo", "algo.epochs=2", "algo.publish_after_epochs=2"), check_env=False)


@pytest.mark.parametrize("env_id", ["LunarLander-v3", "LunarLanderContinuous-v3"])
def test_appo_lunarlander_preset_overlaps_two_of_three_epochs_with_sampling(make_cfg, env_id):
    """RL-Zoo's gamma for the task, three epochs over each batch and none later, the workers
    handed the weights after the first; the continuous task alike."""
    cfg = make_cfg("algo=appo", f"env.id={env_id}")
    assert (cfg.algo.gamma, cfg.algo.epochs, cfg.algo.reuse_per_batch, cfg.algo.publish_after_epochs) == (0.999, 3, 1, 1)
    baseline = make_cfg("algo=appo", f"env.id={env_id}", "preset=null")
    assert (baseline.algo.gamma, baseline.algo.epochs, baseline.algo.publish_after_epochs) == (0.99, 1, None)


def test_ppo_stays_blocking_and_on_policy_by_default(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg("parallel=multiprocess", "workers=2", "total_steps=100000", run_dir=tmp_path / "p"))
    try:
        assert (trainer.sampler.sync_mode, trainer.sampler.max_policy_lag) == ("blocking", 1)
        assert trainer.train()["policy_lag_max"] == 0
    finally:
        trainer.close()


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [(), ("algo.epochs=2", "algo.publish_after_epochs=1")])
def test_appo_resumes_exactly_with_its_target_network_and_buffer(make_cfg, tmp_path, schedule):
    """Also when each update handed the workers its weights after the first epoch: a resumed run
    acts its next batch with those (kept in the checkpoint), as the run that went on did."""
    overrides = ("algo=appo", "total_steps=100000", "checkpoint.every=0", *schedule)
    straight = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "straight"))
    rows = [straight.train() for _ in range(6)]
    straight.close()
    first = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "first"))
    for _ in range(3):
        first.train()
    assert first.algorithm.buffer, "the buffer should hold batches still to be reused"
    assert (first.algorithm.begun_weights is not None) == bool(schedule)
    path = first.save()
    first.close()
    resumed = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "resumed"))
    resumed.restore(path)
    again = [resumed.train() for _ in range(3)]
    resumed.close()
    keys = ("env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value", "gradient_steps")
    assert [{k: r[k] for k in keys} for r in rows[3:]] == [{k: r[k] for k in keys} for r in again]


def test_impala_pulls_gaussian_means_back_inside_the_action_bounds(make_cfg, tmp_path):
    """The bounds penalty (ActorCriticBase.bounds_penalty): 0 within MEAN_SOFT_BOUND of the
    normalised range, the squared excess past it, unbounded dimensions left out. IMPALA's update
    on Pendulum, with the actor's mean pushed far past its bound (every draw clipped to the same
    torque, as in a run that collapsed), brings it back; with algo.bounds_loss_coef=0 it stays."""
    import dataclasses

    import torch

    from rlpar.envs.spaces import ActionInfo
    from rlpar.models.modules.actor_critic import MEAN_SOFT_BOUND
    from rlpar.models.spec import PolicySpec

    box = ActionInfo(discrete=False, size=3, low=(-2.0, -1.0, -float("inf")), high=(2.0, 1.0, float("inf")))
    model = dataclasses.replace(PolicySpec(obs_dim=2, action=box), hidden_sizes=(8,)).build()
    out = torch.tensor([[0.5, -1.0, 9.0], [MEAN_SOFT_BOUND + 2.0, -(MEAN_SOFT_BOUND + 0.5), -9.0]])
    assert model.bounds_penalty(out).tolist() == pytest.approx([0.0, 4.0 + 0.25])
    logp, _, _, bounds = model.action_terms(out, torch.zeros(2), torch.zeros(2, 3), False, with_bounds=True)
    assert torch.equal(bounds, model.bounds_penalty(out)) and logp.shape == (2,)

    means = {}
    for coef in (0.01, 0.0):
        trainer = build_trainer(make_cfg("algo=impala", "env=pendulum", "preset=null", "total_steps=100000",
                                         f"algo.bounds_loss_coef={coef}", "checkpoint.every=0",
                                         run_dir=tmp_path / f"b{coef}"))
        try:
            model = trainer.algorithm.model
            with torch.no_grad():
                model.biases[-1][0, 0, 0] += 6.0  # the actor's mean: about 6 (in [-1, 1] units), all draws at +2
            rows = [trainer.train() for _ in range(25)]
            obs = torch.zeros(16, model.spec.obs_dim)
            with torch.no_grad():
                means[coef] = float(model.towers(obs)[0].mean())
        finally:
            trainer.close()
        assert all(r["loss_bounds"] >= 0 for r in rows) and rows[0]["loss_bounds"] > 1.0
    # without the penalty nothing moves the mean (no advantage tells clipped draws apart); with it,
    # Adam walks it back at about lr (1e-3) a gradient step
    assert means[0.0] == pytest.approx(6.0, abs=0.05) and means[0.01] < means[0.0] - 0.25, means
