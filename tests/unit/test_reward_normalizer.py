"""The reward normaliser against a direct computation: every environment's discounted return,
step by step, its variance over all steps so far (numpy), and rewards divided by its root."""

import numpy as np
import pytest

from rlpar.learning.estimators.reward_normalizer import RewardNormalizer

GAMMA = 0.9


def episode_batches(seed=0, num_envs=3, T=7, batches=4):
    """Rewards with a large offset (so the return's variance is far from 1), episode ends and
    Gymnasium's autoreset steps (invalid, reward 0) after each end."""
    rng = np.random.default_rng(seed)
    out = []
    pending = np.zeros(num_envs, bool)
    for _ in range(batches):
        rewards = rng.normal(5.0, 3.0, size=(T, num_envs)).astype(np.float32)
        terminated = rng.random((T, num_envs)) < 0.15
        truncated = rng.random((T, num_envs)) < 0.05
        valid = np.empty((T, num_envs), bool)
        for t in range(T):
            valid[t] = ~pending
            rewards[t, pending] = 0.0
            terminated[t, pending] = truncated[t, pending] = False
            pending = (terminated[t] | truncated[t]) & valid[t]
        out.append(dict(rewards=rewards, terminated=terminated, truncated=truncated, valid=valid))
    return out


def reference_returns(batches, num_envs):
    """Discounted return of every valid step, environment by environment, in one long sequence."""
    running = np.zeros(num_envs)
    per_batch = []
    for b in batches:
        values = []
        for t in range(len(b["rewards"])):
            for e in range(num_envs):
                if b["valid"][t, e]:
                    running[e] = running[e] * GAMMA + b["rewards"][t, e]
                    values.append(running[e])
                    if b["terminated"][t, e] or b["truncated"][t, e]:
                        running[e] = 0.0
        per_batch.append(np.array(values))
    return per_batch


def test_scales_by_the_standard_deviation_of_all_discounted_returns_so_far():
    batches = episode_batches()
    normalizer = RewardNormalizer(gamma=GAMMA, enabled=True, clip=1e9)
    normalizer.count = 0.0  # no prior pseudo-observation: exactly numpy's variance of the data
    seen = []
    for b, returns in zip(batches, reference_returns(batches, 3)):
        scaled = normalizer(b["rewards"], env_ids=np.arange(3), terminated=b["terminated"],
                            truncated=b["truncated"], valid=b["valid"])
        seen.append(returns)
        expected_std = np.concatenate(seen).std()
        assert expected_std > 3.0  # far from the initial 1: a stale or missing update would show
        np.testing.assert_allclose(scaled, b["rewards"] / np.sqrt(expected_std**2 + 1e-8), rtol=1e-5)


def test_columns_in_any_order_and_one_environment_twice_give_the_same_statistics():
    """Columns are followed by their global ids: a batch whose columns come permuted, or which
    holds one worker's two consecutive rollouts, changes nothing."""
    batches = episode_batches(seed=1, num_envs=2, T=5, batches=2)
    straight = RewardNormalizer(gamma=GAMMA, enabled=True)
    for b in batches:
        straight(b["rewards"], env_ids=np.arange(2), terminated=b["terminated"], truncated=b["truncated"], valid=b["valid"])
    # Environment 1's two rollouts side by side (first, then second), then environment 0's, reversed.
    order = [(0, 1), (1, 1), (0, 0), (1, 0)]  # (batch, environment)
    joined = {k: np.stack([batches[i][k][:, e] for i, e in order], axis=1) for k in batches[0]}
    shuffled = RewardNormalizer(gamma=GAMMA, enabled=True)
    shuffled(joined["rewards"], env_ids=np.array([e for _, e in order]), terminated=joined["terminated"],
             truncated=joined["truncated"], valid=joined["valid"])
    np.testing.assert_allclose(shuffled.discounted, straight.discounted, rtol=1e-12)
    assert (shuffled.mean, shuffled.count) == pytest.approx((straight.mean, straight.count), rel=1e-10)
    assert shuffled.var == pytest.approx(straight.var, rel=1e-10)


def test_clips_and_leaves_rewards_alone_when_disabled():
    b = episode_batches(seed=2)[0]
    off = RewardNormalizer(gamma=GAMMA, enabled=False)
    assert off(b["rewards"], env_ids=np.arange(3), terminated=b["terminated"], truncated=b["truncated"],
               valid=b["valid"]) is b["rewards"]
    tight = RewardNormalizer(gamma=GAMMA, enabled=True, clip=0.5)
    scaled = tight(b["rewards"], env_ids=np.arange(3), terminated=b["terminated"], truncated=b["truncated"], valid=b["valid"])
    assert scaled.max() == pytest.approx(0.5) and scaled.min() >= -0.5


def test_state_round_trips():
    b = episode_batches(seed=3)[0]
    first = RewardNormalizer(gamma=GAMMA, enabled=True)
    first(b["rewards"], env_ids=np.arange(3), terminated=b["terminated"], truncated=b["truncated"], valid=b["valid"])
    second = RewardNormalizer(gamma=GAMMA, enabled=True)
    second.load_state_dict(first.state_dict())
    nxt = episode_batches(seed=4)[0]
    kwargs = dict(env_ids=np.arange(3), terminated=nxt["terminated"], truncated=nxt["truncated"], valid=nxt["valid"])
    np.testing.assert_array_equal(first(nxt["rewards"], **kwargs), second(nxt["rewards"], **kwargs))
