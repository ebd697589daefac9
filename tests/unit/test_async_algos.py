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


def test_ppo_stays_blocking_and_on_policy_by_default(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg("parallel=multiprocess", "workers=2", "total_steps=100000", run_dir=tmp_path / "p"))
    try:
        assert (trainer.sampler.sync_mode, trainer.sampler.max_policy_lag) == ("blocking", 1)
        assert trainer.train()["policy_lag_max"] == 0
    finally:
        trainer.close()


@pytest.mark.slow
def test_appo_resumes_exactly_with_its_target_network_and_buffer(make_cfg, tmp_path):
    overrides = ("algo=appo", "total_steps=100000", "checkpoint.every=0")
    straight = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "straight"))
    rows = [straight.train() for _ in range(6)]
    straight.close()
    first = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "first"))
    for _ in range(3):
        first.train()
    assert first.algorithm.buffer, "the buffer should hold batches still to be reused"
    path = first.save()
    first.close()
    resumed = build_trainer(make_cfg(*overrides, run_dir=tmp_path / "resumed"))
    resumed.restore(path)
    again = [resumed.train() for _ in range(3)]
    resumed.close()
    keys = ("env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value", "gradient_steps")
    assert [{k: r[k] for k in keys} for r in rows[3:]] == [{k: r[k] for k in keys} for r in again]
