import math

import numpy as np
import pytest

from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.estimators.vtrace import compute_vtrace, offpolicy_metrics
from tests.episode_flags import covers_every_case, rollout_flags


def random_rollout(seed, T=12, N=8):
    rng = np.random.default_rng(seed)
    terminated, truncated, valid = rollout_flags(rng, T, N)
    behaviour_logp = rng.uniform(-3.0, -0.1, (T, N)).astype(np.float32)
    return dict(
        behaviour_logp=behaviour_logp,
        target_logp=(behaviour_logp + rng.normal(0.0, 0.8, (T, N))).astype(np.float32),
        rewards=rng.normal(size=(T, N)).astype(np.float32),
        values=rng.normal(size=(T, N)).astype(np.float32),
        bootstrap_value=rng.normal(size=N).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        valid=valid,
    )


def reference_vtrace(mu_logp, pi_logp, r, V, bootstrap, terminated, truncated, valid, gamma, rho_bar, c_bar, pg_rho_bar, lam):
    """One environment, straight from the paper's definition, with plain Python floats:

        v_s = V(x_s) + sum_{t=s}^{e} gamma^(t-s) (prod_{i=s}^{t-1} c_i) rho_t (r_t + gamma V(x_{t+1}) - V(x_t))

    where e is the last step of the episode inside the rollout, and the policy-gradient advantage
    is pg_rho_s (r_s + gamma v_{s+1} - V(x_s)). No recursion: every v_s is its own nested sum."""
    T = len(r)
    ratio = [math.exp(float(pi_logp[t]) - float(mu_logp[t])) for t in range(T)]

    def value_after(t):  # V(x_{t+1}) as step t sees it
        if terminated[t]:
            return 0.0
        return float(V[t + 1]) if t + 1 < T else float(bootstrap)

    def last_step_of_episode(s):
        for t in range(s, T):
            if terminated[t] or truncated[t]:
                return t
        return T - 1

    def v(s):
        if not valid[s]:
            return float(V[s])
        total = float(V[s])
        for t in range(s, last_step_of_episode(s) + 1):
            trace = 1.0
            for i in range(s, t):
                trace *= lam * min(c_bar, ratio[i])
            delta = min(rho_bar, ratio[t]) * (float(r[t]) + gamma * value_after(t) - float(V[t]))
            total += gamma ** (t - s) * trace * delta
        return total

    def pg_advantage(s):
        if not valid[s]:
            return 0.0
        next_v = v(s + 1) if last_step_of_episode(s) > s else value_after(s)
        return min(pg_rho_bar, ratio[s]) * (float(r[s]) + gamma * next_v - float(V[s]))

    return [v(s) for s in range(T)], [pg_advantage(s) for s in range(T)]


@pytest.mark.parametrize(
    "rho_bar, c_bar, pg_rho_bar, lam",
    [(1.0, 1.0, None, 1.0), (2.0, 0.5, 1.5, 0.9), (math.inf, math.inf, math.inf, 1.0), (0.7, 1.3, None, 0.5)],
)
def test_matches_the_papers_definition_with_episode_ends(rho_bar, c_bar, pg_rho_bar, lam):
    data = random_rollout(seed=3)
    ratios = np.exp(data["target_logp"] - data["behaviour_logp"])
    # the data exercises every case the reference distinguishes
    assert covers_every_case(data["terminated"], data["truncated"], data["valid"])
    assert (ratios > 2.0).any() and (ratios < 0.5).any()
    gamma = 0.95
    vs, pg = compute_vtrace(
        **data,
        gamma=gamma,
        clip_rho_threshold=rho_bar,
        clip_c_threshold=c_bar,
        clip_pg_rho_threshold=pg_rho_bar,
        vtrace_lambda=lam,
    )
    assert vs.shape == pg.shape == data["rewards"].shape
    for n in range(data["rewards"].shape[1]):
        column = [data[k][:, n] for k in ("behaviour_logp", "target_logp", "rewards", "values")]
        flags = [data[k][:, n] for k in ("terminated", "truncated", "valid")]
        ref_vs, ref_pg = reference_vtrace(
            *column, data["bootstrap_value"][n], *flags, gamma, rho_bar, c_bar,
            rho_bar if pg_rho_bar is None else pg_rho_bar, lam,
        )
        np.testing.assert_allclose(vs[:, n], ref_vs, rtol=1e-5, atol=1e-5, err_msg=f"vs, env {n}")
        np.testing.assert_allclose(pg[:, n], ref_pg, rtol=1e-5, atol=1e-5, err_msg=f"pg advantage, env {n}")


def test_traces_stop_at_a_termination_even_when_the_next_step_is_valid():
    """With next-step autoreset the invalid step after an episode end already stops the trace;
    a layout without that step (an environment that resets within its step) must stop it too."""
    data = random_rollout(seed=6)
    rng = np.random.default_rng(6)
    data["valid"] = np.ones_like(data["valid"])
    data["truncated"] = np.zeros_like(data["truncated"])
    data["terminated"] = rng.random(data["terminated"].shape) < 0.25
    vs, pg = compute_vtrace(**data, gamma=0.95, clip_rho_threshold=2.0, vtrace_lambda=0.9)
    for n in range(vs.shape[1]):
        column = [data[k][:, n] for k in ("behaviour_logp", "target_logp", "rewards", "values")]
        flags = [data[k][:, n] for k in ("terminated", "truncated", "valid")]
        ref_vs, ref_pg = reference_vtrace(*column, data["bootstrap_value"][n], *flags, 0.95, 2.0, 1.0, 2.0, 0.9)
        np.testing.assert_allclose(vs[:, n], ref_vs, rtol=1e-5, atol=1e-5, err_msg=f"vs, env {n}")
        np.testing.assert_allclose(pg[:, n], ref_pg, rtol=1e-5, atol=1e-5, err_msg=f"pg advantage, env {n}")


def test_autoreset_steps_have_the_value_as_target_and_no_advantage():
    data = random_rollout(seed=4)
    vs, pg = compute_vtrace(**data, gamma=0.9)
    invalid = ~data["valid"]
    assert invalid.any()
    np.testing.assert_array_equal(vs[invalid], data["values"][invalid])
    np.testing.assert_array_equal(pg[invalid], 0.0)


@pytest.mark.parametrize("lam", [1.0, 0.8])
def test_on_policy_targets_are_gae_returns(lam):
    """pi == mu makes every ratio 1: then vs_t - V_t = sum_k (gamma lambda)^k delta_{t+k}, GAE(lambda)'s
    advantage, so vs are GAE's returns. With lambda = 1, r_t + gamma vs_{t+1} - V_t telescopes to
    the same sum, so the policy-gradient advantages are GAE(1)'s advantages too."""
    data = random_rollout(seed=5, T=16, N=8)
    data["target_logp"] = data["behaviour_logp"].copy()
    gamma = 0.97
    vs, pg = compute_vtrace(**data, gamma=gamma, vtrace_lambda=lam)
    advantages, returns = compute_gae(
        rewards=data["rewards"],
        values=data["values"],
        bootstrap_value=data["bootstrap_value"],
        terminated=data["terminated"],
        truncated=data["truncated"],
        valid=data["valid"],
        gamma=gamma,
        gae_lambda=lam,
    )
    np.testing.assert_allclose(vs, returns, rtol=1e-5, atol=1e-5)
    if lam == 1.0:
        np.testing.assert_allclose(pg, advantages, rtol=1e-5, atol=1e-5)
    else:  # the advantage bootstraps from the lambda-return, not from V: not GAE(lambda)'s advantage
        assert not np.allclose(pg, advantages, rtol=1e-3, atol=1e-3)


def two_steps(ratios, **clips):
    """One environment, two steps, no episode end: gamma 0.9, V = [0.5, 1.0], bootstrap 2.0, r = [1, 2]."""
    behaviour = np.full((2, 1), -1.0, np.float32)
    vs, pg = compute_vtrace(
        behaviour_logp=behaviour,
        target_logp=(behaviour + np.log(np.asarray(ratios, np.float64))[:, None]).astype(np.float32),
        rewards=np.array([[1.0], [2.0]], np.float32),
        values=np.array([[0.5], [1.0]], np.float32),
        bootstrap_value=np.array([2.0], np.float32),
        terminated=np.zeros((2, 1), bool),
        truncated=np.zeros((2, 1), bool),
        valid=np.ones((2, 1), bool),
        gamma=0.9,
        **clips,
    )
    return vs[:, 0], pg[:, 0]


# TD errors before any ratio: step 1: 2 + 0.9 * 2.0 - 1.0 = 2.8; step 0: 1 + 0.9 * 1.0 - 0.5 = 1.4


def test_large_ratios_are_clipped_to_rho_bar_and_c_bar():
    vs, pg = two_steps([3.0, 0.5])  # rho_bar = c_bar = 1: rho = [1, 0.5], c_0 = 1
    # vs_1 = 1.0 + 0.5 * 2.8 = 2.4;  vs_0 = 0.5 + 1 * 1.4 + 0.9 * 1 * (0.5 * 2.8) = 3.16
    assert vs == pytest.approx([3.16, 2.4], rel=1e-6)
    # pg_0 = 1 * (1 + 0.9 * vs_1 - 0.5) = 2.66;  pg_1 = 0.5 * (2 + 0.9 * 2.0 - 1.0) = 1.4
    assert pg == pytest.approx([2.66, 1.4], rel=1e-6)


def test_without_clipping_the_full_ratios_apply():
    vs, pg = two_steps([3.0, 0.5], clip_rho_threshold=math.inf, clip_c_threshold=math.inf)
    # rho_0 = c_0 = 3:  vs_0 = 0.5 + 3 * 1.4 + 0.9 * 3 * 1.4 = 8.48;  pg_0 = 3 * (1 + 0.9 * 2.4 - 0.5)
    assert vs == pytest.approx([8.48, 2.4], rel=1e-6)
    assert pg == pytest.approx([3 * 2.66, 1.4], rel=1e-6)


def test_each_threshold_clips_only_its_own_term():
    # c_bar = 0.5 cuts the trace (c_0 = 0.5) but not the TD weight (rho_0 = min(2, 3) = 2);
    # the policy gradient uses its own threshold: min(1.2, 3) = 1.2
    vs, pg = two_steps([3.0, 4.0], clip_rho_threshold=2.0, clip_c_threshold=0.5, clip_pg_rho_threshold=1.2)
    # vs_1 = 1.0 + 2 * 2.8 = 6.6;  vs_0 = 0.5 + 2 * 1.4 + 0.9 * 0.5 * (2 * 2.8) = 5.82
    assert vs == pytest.approx([5.82, 6.6], rel=1e-6)
    # pg_0 = 1.2 * (1 + 0.9 * 6.6 - 0.5) = 7.728;  pg_1 = 1.2 * 2.8 = 3.36
    assert pg == pytest.approx([7.728, 3.36], rel=1e-6)


def test_lambda_scales_the_trace():
    vs, _ = two_steps([1.0, 1.0], vtrace_lambda=0.5)
    # vs_0 = 0.5 + 1.4 + 0.9 * 0.5 * 2.8 = 3.16
    assert vs == pytest.approx([3.16, 3.8], rel=1e-6)


def test_an_overflowing_ratio_is_clipped_not_nan():
    behaviour = np.array([[-200.0]], np.float32)
    vs, pg = compute_vtrace(
        behaviour_logp=behaviour,
        target_logp=np.array([[600.0]], np.float32),  # exp(800) overflows
        rewards=np.array([[1.0]], np.float32),
        values=np.array([[0.5]], np.float32),
        bootstrap_value=np.array([2.0], np.float32),
        terminated=np.zeros((1, 1), bool),
        truncated=np.zeros((1, 1), bool),
        valid=np.ones((1, 1), bool),
        gamma=0.9,
    )
    assert vs[0, 0] == pytest.approx(0.5 + 1 + 1.8 - 0.5) and pg[0, 0] == pytest.approx(1 + 1.8 - 0.5)


def test_offpolicy_metrics_measure_the_valid_steps_log_ratio_and_the_share_outside_the_clip_range():
    """|log pi/mu| is averaged over the valid steps only, and a step counts as outside PPO's clip
    range when pi/mu leaves [0.8, 1.2] (ratios exp(0.1), exp(-0.3), exp(0.5): the last two)."""
    behaviour = np.zeros((2, 2), np.float32)
    target = np.array([[0.1, -0.3], [0.5, 9.0]], np.float32)
    valid = np.array([[True, True], [True, False]])  # the 9.0 is an autoreset step: not counted
    metrics = offpolicy_metrics(target, behaviour, valid)
    assert metrics["offpolicy_log_ratio"] == pytest.approx((0.1 + 0.3 + 0.5) / 3)
    assert metrics["offpolicy_clip_fraction"] == pytest.approx(2 / 3)
    assert offpolicy_metrics(target, target, valid) == {"offpolicy_log_ratio": 0.0, "offpolicy_clip_fraction": 0.0}
    assert offpolicy_metrics(target, behaviour, np.zeros_like(valid)) == {
        "offpolicy_log_ratio": 0.0,
        "offpolicy_clip_fraction": 0.0,
    }
