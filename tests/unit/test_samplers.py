"""Every sampler against the local one, sync modes, and clean shutdown (no Ray here)."""

import numpy as np
import pytest

from rlpar.runtime.build import build_trainer



def first_batch(make_cfg, tmp_path, name, *overrides):
    trainer = build_trainer(make_cfg(*overrides, run_dir=tmp_path / name))
    try:
        algorithm = trainer.algorithm
        batch = algorithm.sampler.sample(algorithm.get_weights(), algorithm.version)
        batch = batch.copy()
        metrics = trainer.train()
    finally:
        trainer.close()
    return batch, metrics


EXACT = ("obs", "actions", "rewards", "terminated", "truncated", "valid")
FLOAT = ("logp", "values", "bootstrap_value")  # matmuls of different batch sizes round differently


def assert_same_batch(a, b):
    for field in EXACT:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    for field in FLOAT:
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-5, atol=1e-6, err_msg=field)
    assert a.episode_ends == b.episode_ends
    assert a.episode_returns == b.episode_returns and a.episode_lengths == b.episode_lengths


def assert_first_iteration_matches_local(make_cfg, tmp_path, common, parallel):
    """8 environments in one local worker vs `parallel=<parallel> workers=4 envs_per_worker=2`:
    the same first batch and first metrics row. Returns the other mode's first metrics."""
    local, local_metrics = first_batch(make_cfg, tmp_path, "local", *common, "workers=1", "envs_per_worker=8")
    other, other_metrics = first_batch(
        make_cfg, tmp_path, parallel, *common, f"parallel={parallel}", "workers=4", "envs_per_worker=2"
    )
    assert_same_batch(local, other)
    for key in ("env_steps", "episodes", "episode_return_mean"):
        assert local_metrics[key] == other_metrics[key], key
    return other_metrics


@pytest.mark.slow
@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_multiprocess_first_batch_equals_local(make_cfg, tmp_path, env):
    common = (f"env={env}", "algo.rollout_length=64", "algo.minibatch_size=64")
    assert_first_iteration_matches_local(make_cfg, tmp_path, common, "multiprocess")


def test_non_blocking_multiprocess_bounds_policy_lag(make_cfg, tmp_path):
    cfg = make_cfg(
        "parallel=multiprocess",
        "parallel.sync_mode=non_blocking",
        "parallel.max_policy_lag=1",
        "workers=2",
        "envs_per_worker=4",
        run_dir=tmp_path / "nb",
    )
    trainer = build_trainer(cfg)
    try:
        rows = [trainer.train() for _ in range(12)]
    finally:
        trainer.close()
    assert all(r["policy_lag_max"] <= 1 for r in rows)
    assert max(r["policy_lag_max"] for r in rows) == 1  # sampling really overlapped learning
    assert all(r["policy_lag_min"] >= 0 for r in rows)
    assert all(r["batches_this_iter"] >= 2 for r in rows)  # PPO learns from a full batch: one rollout per worker
    assert rows[-1]["env_steps"] == sum(r["batches_this_iter"] for r in rows) * 4 * cfg.algo.rollout_length


def test_multiprocess_close_leaves_no_process_or_shared_memory(make_cfg, tmp_path):
    from multiprocessing import shared_memory

    trainer = build_trainer(make_cfg("parallel=multiprocess", "workers=3", "envs_per_worker=2", run_dir=tmp_path / "c"))
    trainer.train()
    processes = list(trainer.sampler.processes)
    names = [b.name for b in trainer.sampler.blocks.values()]
    trainer.close()
    assert processes and not any(p.is_alive() for p in processes)
    for name in names:
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)


@pytest.mark.parametrize("common", [
    # Observation statistics are summed per environment, so normalised runs stay identical.
    ("env=pendulum", "algo.rollout_length=64", "model.normalize_obs=true"),
    # CartPole's many episodes per iteration, and A2C, on all three samplers: test_distributed.py.
])
@pytest.mark.slow
def test_multiprocess_matches_local_iteration_after_iteration(make_cfg, tmp_path, common):
    rows = {}
    for name, overrides in (("local", ("workers=1", "envs_per_worker=8")),
                            ("mp", ("parallel=multiprocess", "workers=4", "envs_per_worker=2"))):
        trainer = build_trainer(make_cfg(*common, *overrides, run_dir=tmp_path / name))
        try:
            rows[name] = [trainer.train() for _ in range(5)]
        finally:
            trainer.close()
    keys = ("env_steps", "episodes", "episode_return_mean", "loss_policy", "loss_value")
    assert [{k: r[k] for k in keys} for r in rows["local"]] == [{k: r[k] for k in keys} for r in rows["mp"]]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["local", "multiprocess"])
def test_actor_idle_time_is_the_time_between_requests(make_cfg, tmp_path, parallel):
    import time

    trainer = build_trainer(make_cfg(f"parallel={parallel}", "workers=2", "envs_per_worker=2", run_dir=tmp_path / parallel))
    try:
        algorithm = trainer.algorithm
        sample = lambda: algorithm.sampler.sample(algorithm.get_weights(), algorithm.version)  # noqa: E731
        first = sample()
        time.sleep(0.25)
        second = sample()
        idle_fraction = trainer.train()["actor_idle_fraction"]
    finally:
        trainer.close()
    workers = 1 if parallel == "local" else 2  # local: one worker steps every environment
    assert first.actor_idle_s == 0.0 and first.actor_busy_s > 0.0
    assert 0.25 * workers <= second.actor_idle_s < 2.0 * workers
    assert 0.0 < idle_fraction < 1.0


def test_noise_drawn_for_several_rollouts_at_once_is_each_rollouts_own_draw_and_survives_a_checkpoint():
    """Each environment's generator draws several rollouts' noise in one call: the numbers of one
    draw per rollout, and a state saved between two rollouts of a draw resumes them exactly."""
    from rlpar.envs.factory import resolve_env_spec
    from rlpar.envs.spaces import ActionInfo, draw_noise
    from rlpar.models.spec import PolicySpec
    from rlpar.sampling.rollout import NOISE_STREAM, RolloutWorker

    def worker():
        return RolloutWorker(env_spec=resolve_env_spec(id="CartPole-v1"), num_envs=3, rollout_length=8, seed=4,
                             policy_spec=PolicySpec(obs_dim=4, action=ActionInfo(discrete=True, size=2)))

    first = worker()
    assert first.rollouts_per_draw > 2
    rollouts = first.rollouts_per_draw + 2  # into a second draw
    generators = [np.random.default_rng([4, NOISE_STREAM, i]) for i in range(3)]
    for _ in range(rollouts):
        expected = np.stack([draw_noise(g, first.policy_spec.action, 8) for g in generators], axis=1)
        np.testing.assert_array_equal(first._draw_noise(), expected)

    first.set_weights({k: v.numpy() for k, v in first.policy_spec.build().state_dict().items()}, 0)
    first.sample()  # a rollout of the draw taken: some of it is still ahead
    state = first.get_state()
    ahead = [first._draw_noise() for _ in range(rollouts)]
    second = worker()
    second.set_state(state)
    for expected in ahead:
        np.testing.assert_array_equal(second._draw_noise(), expected)
