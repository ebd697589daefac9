import numpy as np
import pytest

from rlpar.learning.estimators.gae import compute_gae


def gae(rewards, values, bootstrap, terminated=None, truncated=None, valid=None, gamma=0.9, lam=0.5):
    rewards = np.asarray(rewards, np.float32)[:, None]
    shape = rewards.shape
    flag = lambda x: np.zeros(shape, bool) if x is None else np.asarray(x, bool)[:, None]
    return compute_gae(
        rewards=rewards,
        values=np.asarray(values, np.float32)[:, None],
        bootstrap_value=np.asarray([bootstrap], np.float32),
        terminated=flag(terminated),
        truncated=flag(truncated),
        valid=np.ones(shape, bool) if valid is None else np.asarray(valid, bool)[:, None],
        gamma=gamma,
        gae_lambda=lam,
    )


def test_no_episode_end_matches_hand_computation():
    adv, ret = gae([1.0, 2.0], [0.5, 1.0], bootstrap=2.0)
    d1 = 2.0 + 0.9 * 2.0 - 1.0  # 2.8
    d0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    assert adv[:, 0] == pytest.approx([d0 + 0.45 * d1, d1])
    assert ret[:, 0] == pytest.approx([d0 + 0.45 * d1 + 0.5, d1 + 1.0])


def test_termination_stops_bootstrap_and_carry():
    # step 1 terminates; step 2 is the autoreset step (invalid); step 3 starts a new episode
    adv, _ = gae(
        rewards=[1.0, 1.0, 0.0, 1.0],
        values=[0.2, 0.4, 9.0, 0.3],
        bootstrap=0.6,
        terminated=[0, 1, 0, 0],
        valid=[1, 1, 0, 1],
    )
    d3 = 1.0 + 0.9 * 0.6 - 0.3
    d1 = 1.0 - 0.4  # no bootstrap through a termination
    d0 = 1.0 + 0.9 * 0.4 - 0.2
    assert adv[:, 0] == pytest.approx([d0 + 0.45 * d1, d1, 0.0, d3])


def test_truncation_bootstraps_from_final_observation_value():
    # step 1 truncates; values[2] is V(final obs) computed on the autoreset step
    adv, _ = gae(
        rewards=[1.0, 1.0, 0.0],
        values=[0.2, 0.4, 5.0],
        bootstrap=0.7,
        truncated=[0, 1, 0],
        valid=[1, 1, 0],
    )
    d1 = 1.0 + 0.9 * 5.0 - 0.4
    d0 = 1.0 + 0.9 * 0.4 - 0.2
    assert adv[:, 0] == pytest.approx([d0 + 0.45 * d1, d1, 0.0])


def test_truncation_on_last_step_uses_bootstrap_value():
    adv, _ = gae([1.0], [0.5], bootstrap=3.0, truncated=[1])
    assert adv[0, 0] == pytest.approx(1.0 + 0.9 * 3.0 - 0.5)


def test_termination_on_last_step_ignores_bootstrap_value():
    adv, _ = gae([1.0], [0.5], bootstrap=3.0, terminated=[1])
    assert adv[0, 0] == pytest.approx(0.5)


def test_autoreset_step_at_rollout_start_is_zero_and_not_carried():
    adv, _ = gae([0.0, 1.0], [7.0, 0.5], bootstrap=1.0, valid=[0, 1])
    assert adv[0, 0] == 0.0
    assert adv[1, 0] == pytest.approx(1.0 + 0.9 * 1.0 - 0.5)


def test_environments_are_independent_columns():
    rng = np.random.default_rng(0)
    T, N = 6, 3
    args = dict(
        rewards=rng.normal(size=(T, N)).astype(np.float32),
        values=rng.normal(size=(T, N)).astype(np.float32),
        bootstrap_value=rng.normal(size=N).astype(np.float32),
        terminated=rng.random((T, N)) < 0.2,
        truncated=rng.random((T, N)) < 0.2,
        valid=rng.random((T, N)) < 0.9,
        gamma=0.99,
        gae_lambda=0.95,
    )
    adv, _ = compute_gae(**args)
    for i in range(N):
        column = {k: (v[:, i : i + 1] if isinstance(v, np.ndarray) and v.ndim == 2 else v) for k, v in args.items()}
        column["bootstrap_value"] = args["bootstrap_value"][i : i + 1]
        adv_i, _ = compute_gae(**column)
        np.testing.assert_allclose(adv[:, i], adv_i[:, 0], rtol=1e-6)
