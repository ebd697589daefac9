import numpy as np
import pytest

from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.estimators.nstep import compute_nstep_returns
from tests.episode_flags import covers_every_case, rollout_flags


def random_rollout(seed, T=12, N=8):
    rng = np.random.default_rng(seed)
    terminated, truncated, valid = rollout_flags(rng, T, N)
    return dict(
        rewards=rng.normal(size=(T, N)).astype(np.float32),
        values=rng.normal(size=(T, N)).astype(np.float32),
        bootstrap_value=rng.normal(size=N).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        valid=valid,
    )


def reference_returns(r, V, bootstrap, terminated, truncated, valid, gamma, n):
    """One environment, by the definition: discounted rewards for up to n steps, then the value
    of the observation reached, unless the episode ended on the way (V(final observation) after
    a truncation, nothing after a termination). Autoreset steps: the value itself."""
    T = len(r)
    value_of_obs_after = lambda s: float(V[s + 1]) if s + 1 < T else float(bootstrap)
    returns = []
    for t in range(T):
        if not valid[t]:
            returns.append(float(V[t]))
            continue
        total = 0.0
        for k in range(n):
            s = t + k
            total += gamma**k * float(r[s])
            if terminated[s]:
                break
            if truncated[s] or s == T - 1 or k == n - 1:
                total += gamma ** (k + 1) * value_of_obs_after(s)
                break
        returns.append(total)
    return returns


def nstep(data, n, gamma=0.9):
    return compute_nstep_returns(**data, gamma=gamma, n_steps=n)


def gae(data, lam, gamma=0.9):
    return compute_gae(**data, gamma=gamma, gae_lambda=lam)


def seed_covering_every_case():
    data = random_rollout(seed=3)
    assert covers_every_case(data["terminated"], data["truncated"], data["valid"])
    return data


@pytest.mark.parametrize("n", [1, 2, 3, 5, 12, 40])
def test_matches_the_definition_with_episode_ends(n):
    data = seed_covering_every_case()
    advantages, returns = nstep(data, n)
    for e in range(returns.shape[1]):
        columns = [data[k][:, e] for k in ("rewards", "values")]
        flags = [data[k][:, e] for k in ("terminated", "truncated", "valid")]
        expected = reference_returns(*columns, data["bootstrap_value"][e], *flags, gamma=0.9, n=n)
        np.testing.assert_allclose(returns[:, e], expected, rtol=1e-5, atol=1e-5, err_msg=f"env {e}")
    np.testing.assert_allclose(advantages, returns - data["values"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [12, 13, 100])
def test_whole_rollout_returns_are_gae_with_lambda_one(n):
    data = seed_covering_every_case()  # T = 12
    for ours, theirs in zip(nstep(data, n), gae(data, lam=1.0)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_one_step_returns_are_gae_with_lambda_zero():
    data = seed_covering_every_case()
    for ours, theirs in zip(nstep(data, 1), gae(data, lam=0.0)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_shorter_windows_differ_from_the_whole_rollout():
    data = seed_covering_every_case()
    _, whole = gae(data, lam=1.0)
    _, three = nstep(data, 3)
    assert not np.allclose(three, whole, rtol=1e-3, atol=1e-3)


def test_two_step_returns_by_hand():
    # one environment, T = 4, gamma 0.5: step 1 is truncated, step 2 its autoreset step
    data = dict(
        rewards=np.array([[1.0], [2.0], [0.0], [4.0]], np.float32),
        values=np.array([[10.0], [20.0], [30.0], [40.0]], np.float32),  # 30: V(final obs of the episode)
        bootstrap_value=np.array([50.0], np.float32),
        terminated=np.zeros((4, 1), bool),
        truncated=np.array([[0], [1], [0], [0]], bool),
        valid=np.array([[1], [1], [0], [1]], bool),
    )
    advantages, returns = nstep(data, 2, gamma=0.5)
    assert returns[:, 0] == pytest.approx([
        1 + 0.5 * 2 + 0.25 * 30,  # two rewards, then V(final observation)
        2 + 0.5 * 30,  # the truncation ends the window after one step
        30,  # autoreset step: the value itself
        4 + 0.5 * 50,  # the rollout ends: bootstrap_value
    ])
    assert advantages[:, 0] == pytest.approx(returns[:, 0] - [10, 20, 30, 40])
    assert advantages[2, 0] == 0.0
    data["terminated"], data["truncated"] = data["truncated"], data["terminated"]  # now step 1 terminates
    _, returns = nstep(data, 2, gamma=0.5)
    assert returns[:2, 0] == pytest.approx([1 + 0.5 * 2, 2])


def test_windows_stop_at_a_termination_even_when_the_next_step_is_valid():
    """Next-step autoreset puts an invalid step after every episode end, which already stops the
    window; an environment that resets within its step has none, and must be cut all the same."""
    data = random_rollout(seed=4)
    data["valid"] = np.ones_like(data["valid"])
    data["truncated"] = np.zeros_like(data["truncated"])
    data["terminated"] = np.random.default_rng(4).random(data["terminated"].shape) < 0.25
    _, returns = nstep(data, 4)
    for e in range(returns.shape[1]):
        columns = [data[k][:, e] for k in ("rewards", "values")]
        flags = [data[k][:, e] for k in ("terminated", "truncated", "valid")]
        expected = reference_returns(*columns, data["bootstrap_value"][e], *flags, gamma=0.9, n=4)
        np.testing.assert_allclose(returns[:, e], expected, rtol=1e-5, atol=1e-5, err_msg=f"env {e}")


def test_n_below_one_is_refused():
    with pytest.raises(ValueError, match="n_steps"):
        nstep(seed_covering_every_case(), 0)
