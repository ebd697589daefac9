"""Replay parts against direct computations: ring slots, sampling frequencies of a sum tree
against exact proportions, importance weights and n-step transitions worked out by hand, and a
rate limiter driven through long random interleavings of inserts and samples."""

import io
from collections import deque

import numpy as np
import pytest
import torch

from rlpar.replay import NStepWriter, PrioritizedSampler, RateLimiter, RingStorage, SumTree, UniformSampler
from rlpar.replay.shard import ReplayTable
from tests.episode_flags import covers_every_case, rollout_flags

FIELDS = {"obs": ((2,), np.float32), "actions": ((), np.int64), "done": ((), np.bool_)}


def through_checkpoint(state):
    """What a checkpoint file gives back (weights_only: tensors and plain values only)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def items(first, n):
    ids = np.arange(first, first + n)
    return {"obs": np.stack([ids, -ids], axis=1).astype(np.float32), "actions": ids, "done": ids % 2 == 0}


# ---------------------------------------------------------------- storage


def test_ring_wraps_around_and_returns_the_slots_written():
    storage = RingStorage(capacity=5, fields=FIELDS)
    np.testing.assert_array_equal(storage.add(items(0, 3)), [0, 1, 2])
    assert storage.size == 3
    np.testing.assert_array_equal(storage.add(items(3, 4)), [3, 4, 0, 1])  # items 5 and 6 overwrite 0 and 1
    assert storage.size == 5
    got = storage.get([0, 1, 2, 4])
    np.testing.assert_array_equal(got["actions"], [5, 6, 2, 4])
    np.testing.assert_array_equal(got["obs"][:, 1], [-5, -6, -2, -4])
    np.testing.assert_array_equal(got["done"], [False, True, True, True])
    np.testing.assert_array_equal(storage.add(items(7, 5)), [2, 3, 4, 0, 1])  # a whole lap from the cursor
    np.testing.assert_array_equal(storage.get(np.arange(5))["actions"], [10, 11, 7, 8, 9])


def test_sizes_and_refusals():
    assert RingStorage.required_bytes(1000, FIELDS) == 1000 * (2 * 4 + 8 + 1)
    storage = RingStorage(capacity=4, fields=FIELDS)
    assert storage.bytes_per_item == 17 and storage.capacity == 4
    with pytest.raises(ValueError, match="does not fit"):
        storage.add(items(0, 5))
    with pytest.raises(ValueError, match="shape"):
        storage.add({**items(0, 2), "obs": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match="fields"):
        storage.add({"obs": np.zeros((1, 2), np.float32)})


def test_storage_state_round_trips_and_shares_memory_with_the_filled_part_only():
    storage = RingStorage(capacity=6, fields=FIELDS)
    storage.add(items(0, 4))
    state = storage.state_dict()
    assert state["fields"]["obs"].shape == (4, 2) and state["size"] == 4 and state["cursor"] == 4
    assert state["fields"]["obs"].untyped_storage().nbytes() == 4 * 2 * 4  # the filled slots, nothing more
    restored = RingStorage(capacity=6, fields=FIELDS)
    restored.load_state_dict(through_checkpoint(state))
    for s in (storage, restored):
        s.add(items(4, 5))  # wraps: the cursor came back too
    for name in FIELDS:
        np.testing.assert_array_equal(restored.get(np.arange(6))[name], storage.get(np.arange(6))[name])
    assert restored.size == storage.size == 6
    # No copy: the state's tensors are views of the live arrays (items 6, 7 landed in slots 0, 1).
    np.testing.assert_array_equal(state["fields"]["actions"].numpy(), [6, 7, 8, 3])
    with pytest.raises(ValueError, match="capacity"):
        RingStorage(capacity=3, fields=FIELDS).load_state_dict(storage.state_dict())


# ---------------------------------------------------------------- sum tree


def test_sum_tree_samples_in_exact_proportion_to_priorities():
    rng = np.random.default_rng(0)
    priorities = rng.random(11) * np.array([1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0])  # zeros never drawn; 11: padding
    tree = SumTree(capacity=11)
    tree.update(np.arange(11), priorities)
    assert tree.total == pytest.approx(priorities.sum(), rel=1e-12)
    draws = 400_000
    leaves = tree.find(rng.random(draws) * tree.total)
    counts = np.bincount(leaves, minlength=11)
    assert counts[priorities == 0].sum() == 0
    expected = draws * priorities / priorities.sum()
    positive = priorities > 0
    chi2 = ((counts[positive] - expected[positive]) ** 2 / expected[positive]).sum()
    assert chi2 < 27.9  # chi-square, 7 degrees of freedom: exceeded with probability 0.0005


def test_sum_tree_find_at_boundaries_never_returns_empty_leaves():
    tree = SumTree(capacity=7)
    tree.update(np.arange(7), [1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0])
    queries = [0.0, np.nextafter(1.0, 0.0), 1.0, 3.0, 5.999, 6.0, 7.5, -1.0]
    np.testing.assert_array_equal(tree.find(queries), [0, 0, 2, 4, 4, 4, 4, 0])
    # Rounding: prefix sums of many small priorities, queried at and just past the total.
    tree = SumTree(capacity=1000)
    priorities = np.random.default_rng(1).random(1000) ** 8
    priorities[500:] = 0.0
    tree.update(np.arange(1000), priorities)
    found = tree.find(np.concatenate([np.cumsum(priorities[:500]), [tree.total, np.nextafter(tree.total, 9.0)]]))
    assert np.all(priorities[found] > 0)
    with pytest.raises(ValueError, match="all zero"):
        SumTree(capacity=3).find([0.0])


def test_sum_tree_updates_last_write_wins_and_totals_do_not_drift():
    tree = SumTree(capacity=5)
    tree.update([1, 3, 1, 1], [5.0, 2.0, 7.0, 0.5])
    np.testing.assert_array_equal(tree.get(np.arange(5)), [0, 0.5, 0, 2.0, 0])
    assert tree.total == 2.5 and tree.max_priority == 7.0  # largest ever seen, even if overwritten
    rng = np.random.default_rng(2)
    tree, leaves = SumTree(capacity=3000), np.zeros(3000)
    for _ in range(2000):
        idx, p = rng.integers(0, 3000, 64), rng.random(64) * 10.0 ** rng.integers(-6, 6)
        tree.update(idx, p)
        leaves[idx] = p  # numpy's fancy assignment: last write wins here too
    np.testing.assert_array_equal(tree.get(np.arange(3000)), leaves)
    assert tree.total == pytest.approx(leaves.sum(), rel=1e-12)
    with pytest.raises(ValueError, match="finite"):
        tree.update([0], [np.nan])


# ---------------------------------------------------------------- samplers


def test_prioritized_weights_by_hand():
    # Priorities 1, 2, 3, 4 (alpha = 1): P = 0.1 .. 0.4, N P = 0.4 .. 1.6; beta = 0.4 on the first call.
    sampler = PrioritizedSampler(capacity=4, alpha=1.0, beta_start=0.4, beta_end=1.0, beta_steps=10, epsilon=1e-9,
                                 seed=0)
    sampler.on_insert(np.arange(4), priorities=[1.0, 2.0, 3.0, 4.0])
    unnormalised = {0: 0.4**-0.4, 1: 0.8**-0.4, 2: 1.2**-0.4, 3: 1.6**-0.4}  # 1.442, 1.093, 0.930, 0.829
    seen = set()
    for call in range(10):
        beta = 0.4 + 0.06 * call
        assert sampler.beta == pytest.approx(beta)
        indices, weights = sampler.sample(batch_size=4, size=4)
        # Stratified over [0, 10) in quarters: [0, 2.5) holds items 0-1, [2.5, 5) items 1-2,
        # [5, 7.5) items 2-3 and [7.5, 10) item 3 only.
        assert indices[0] in (0, 1) and indices[1] in (1, 2) and indices[2] in (2, 3) and indices[3] == 3
        expected = np.array([(0.4 * (i + 1)) ** -beta for i in indices])
        np.testing.assert_allclose(weights, expected / expected.max(), rtol=1e-6)
        assert weights.dtype == np.float32
        seen.update(indices.tolist())
        if call == 0:
            hand = np.array([unnormalised[i] for i in indices])
            np.testing.assert_allclose(weights, hand / hand.max(), rtol=1e-6)
    assert seen == {0, 1, 2, 3}


def test_beta_anneals_linearly_over_sample_calls_then_stays():
    sampler = PrioritizedSampler(capacity=8, beta_start=0.4, beta_end=1.0, beta_steps=4, seed=0)
    sampler.on_insert(np.arange(8))
    betas = []
    for _ in range(6):
        betas.append(sampler.beta)
        sampler.sample(batch_size=2, size=8)
    np.testing.assert_allclose(betas, [0.4, 0.55, 0.7, 0.85, 1.0, 1.0])


def test_new_items_get_the_largest_priority_seen():
    sampler = PrioritizedSampler(capacity=8, alpha=0.5, beta_steps=10, epsilon=1e-6, seed=0)
    sampler.on_insert([0, 1])
    np.testing.assert_array_equal(sampler.tree.get([0, 1]), [1.0, 1.0])
    sampler.update_priorities([0, 1], td_errors=[-9.0, 0.0])
    np.testing.assert_allclose(sampler.tree.get([0, 1]), [3.0, 1e-3], rtol=1e-6)  # (|td| + eps)^alpha
    sampler.on_insert([2])
    sampler.update_priorities([0], td_errors=[0.0])  # the maximum is the largest ever, not the current
    sampler.on_insert([3])
    np.testing.assert_allclose(sampler.tree.get([2, 3]), [3.0, 3.0], rtol=1e-6)
    sampler.on_insert([4], priorities=[16.0])  # an actor's own priority, like a TD error
    assert sampler.tree.get([4])[0] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="finite"):
        sampler.update_priorities([0], td_errors=[np.inf])


def test_prioritized_sampling_follows_priorities_and_resumes_exactly():
    sampler = PrioritizedSampler(capacity=6, alpha=1.0, beta_steps=100, epsilon=1e-12, seed=3)
    sampler.on_insert(np.arange(5), priorities=[1.0, 0.0, 2.0, 3.0, 4.0])  # slot 5 never written
    counts = np.zeros(6)
    for _ in range(2000):
        indices, _ = sampler.sample(batch_size=32, size=5)
        counts += np.bincount(indices, minlength=6)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0, 0.2, 0.3, 0.4, 0], atol=0.005)
    restored = PrioritizedSampler(capacity=6, alpha=1.0, beta_steps=100, epsilon=1e-12, seed=99)
    restored.load_state_dict(through_checkpoint(sampler.state_dict()))
    for s in (sampler, restored):
        s.update_priorities([0, 3], td_errors=[5.0, 0.5])
    a, b = sampler.sample(batch_size=16, size=5), restored.sample(batch_size=16, size=5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert restored.beta == sampler.beta and restored.tree.total == sampler.tree.total


def test_uniform_sampler_covers_the_filled_part_with_unit_weights():
    sampler = UniformSampler(seed=0)
    indices, weights = sampler.sample(batch_size=10_000, size=7)
    assert set(indices.tolist()) == set(range(7))
    assert weights.dtype == np.float32 and np.all(weights == 1.0)
    restored = UniformSampler(seed=5)
    restored.load_state_dict(through_checkpoint(sampler.state_dict()))
    np.testing.assert_array_equal(restored.sample(batch_size=5, size=7)[0], sampler.sample(batch_size=5, size=7)[0])


# ---------------------------------------------------------------- n-step writer

A, B = 7, 3  # global environment ids, deliberately not in column order
GAMMA = 0.5


def column(values_a, values_b):
    return np.stack([values_a, values_b], axis=1)


def hand_rollouts():
    """Two rollouts of environments A (column 0) and B (column 1); obs = 100 * rollout + 10 * step
    + column, so every observation is recognisable; last_obs = 100 * rollout + 90 + column."""
    out = []
    for r, (T, rewards, term, trunc, valid) in enumerate([
        # A: four plain steps. B: a termination at 1, autoreset at 2, a truncation at 3 (last step).
        (4, column([1, 2, 3, 4], [1, 2, 0, 5]), column([0, 0, 0, 0], [0, 1, 0, 0]),
         column([0, 0, 0, 0], [0, 0, 0, 1]), column([1, 1, 1, 1], [1, 1, 0, 1])),
        # A: a truncation at 1, autoreset at 2. B: autoreset at 0, terminated (and truncated) at 2.
        (3, column([10, 20, 0], [0, 1, 2]), column([0, 0, 0], [0, 0, 1]), column([0, 1, 0], [0, 0, 1]),
         column([1, 1, 0], [0, 1, 1])),
    ]):
        obs = (100 * r + 10 * np.arange(T)[:, None] + np.arange(2)[None, :]).astype(np.float32)[..., None]
        out.append(dict(obs=obs, actions=(obs[..., 0] + 1000).astype(np.int64), rewards=rewards.astype(np.float32),
                        terminated=term.astype(bool), truncated=trunc.astype(bool), valid=valid.astype(bool),
                        env_ids=np.array([A, B]),
                        last_obs=(100 * r + 90 + np.arange(2)).astype(np.float32)[:, None]))
    return out


# (obs, reward, next_obs, discount, env) of each transition, in emission order, n = 3, gamma = 0.5.
HAND_EXPECTED = [
    [  # rollout 0
        (1, 1 + 0.5 * 2, 21, 0.0, B),  # step 1: B terminates: both open steps, no bootstrap
        (11, 2, 21, 0.0, B),
        (0, 1 + 0.5 * 2 + 0.25 * 3, 30, 0.125, A),  # step 2: A's first transition has its 3 rewards
        (31, 5, 91, 0.5, B),  # step 3: B truncated on the last step: bootstrap from last_obs
        (10, 2 + 0.5 * 3 + 0.25 * 4, 90, 0.125, A),
    ],
    [  # rollout 1: A's steps 2 and 3 of rollout 0 were waiting
        (20, 3 + 0.5 * 4 + 0.25 * 10, 110, 0.125, A),
        (30, 4 + 0.5 * 10 + 0.25 * 20, 120, 0.125, A),  # step 1: A truncated: all bootstrap from obs[2]
        (100, 10 + 0.5 * 20, 120, 0.25, A),
        (110, 20, 120, 0.5, A),
        (111, 1 + 0.5 * 2, 191, 0.0, B),  # step 2: terminated and truncated: terminated wins
        (121, 2, 191, 0.0, B),
    ],
]


def as_rows(out):
    return [(float(o[0]), float(r), float(no[0]), float(d), int(e))
            for o, r, no, d, e in zip(out["obs"], out["rewards"], out["next_obs"], out["discounts"], out["env_ids"])]


def test_nstep_transitions_by_hand_across_two_rollouts():
    writer = NStepWriter(n=3, gamma=GAMMA)
    for rollout, expected in zip(hand_rollouts(), HAND_EXPECTED):
        out = writer.add(**rollout)
        assert as_rows(out) == expected
        np.testing.assert_array_equal(out["actions"], out["obs"][:, 0].astype(np.int64) + 1000)
        assert out["rewards"].dtype == out["discounts"].dtype == np.float32 and out["obs"].shape[1:] == (1,)


def test_nstep_columns_in_another_order_give_the_same_transitions():
    writer = NStepWriter(n=3, gamma=GAMMA)
    for rollout, expected in zip(hand_rollouts(), HAND_EXPECTED):
        swapped = {k: (v[::-1] if k in ("env_ids", "last_obs") else v[:, ::-1]) for k, v in rollout.items()}
        assert as_rows(writer.add(**swapped)) == expected


def reference_nstep(rollouts, n, gamma):
    """The definition, one environment and one step at a time, with a queue per environment."""
    queues, rows = {}, []
    for ro in rollouts:
        T, N = ro["rewards"].shape
        for t in range(T):
            for c in sorted(range(N), key=lambda c: ro["env_ids"][c]):
                if not ro["valid"][t, c]:
                    continue
                queue = queues.setdefault(int(ro["env_ids"][c]), deque())
                queue.append([ro["obs"][t, c], ro["actions"][t, c], 0.0, 0])
                for entry in queue:
                    entry[2] += gamma ** entry[3] * float(ro["rewards"][t, c])
                    entry[3] += 1
                after = ro["obs"][t + 1, c] if t + 1 < T else ro["last_obs"][c]
                done = ro["terminated"][t, c] or ro["truncated"][t, c]
                while queue and (done or queue[0][3] == n):
                    o, a, total, k = queue.popleft()
                    rows.append((o, a, total, after, 0.0 if ro["terminated"][t, c] else gamma**k, ro["env_ids"][c]))
    return rows


def random_rollouts(seed, T, N, count, obs_dim=3):
    rng = np.random.default_rng(seed)
    env_ids = rng.permutation(N) * 2 + 5  # sparse, shuffled global ids
    # One long stretch of steps cut into rollouts, so each continues the one before.
    flags = rollout_flags(rng, T * count, N)
    out = []
    for i in range(count):
        terminated, truncated, valid = (f[i * T : (i + 1) * T] for f in flags)
        out.append(dict(obs=rng.normal(size=(T, N, obs_dim)).astype(np.float32), actions=rng.integers(0, 4, (T, N)),
                        rewards=rng.normal(size=(T, N)).astype(np.float32), terminated=terminated,
                        truncated=truncated, valid=valid, env_ids=env_ids,
                        last_obs=rng.normal(size=(N, obs_dim)).astype(np.float32)))
    return out


def assert_same_rows(out, rows):
    assert len(out["rewards"]) == len(rows)
    np.testing.assert_array_equal(out["obs"], np.array([r[0] for r in rows]).reshape(out["obs"].shape))
    np.testing.assert_array_equal(out["actions"], [r[1] for r in rows])
    np.testing.assert_allclose(out["rewards"], [r[2] for r in rows], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["next_obs"], np.array([r[3] for r in rows]).reshape(out["obs"].shape))
    np.testing.assert_allclose(out["discounts"], [r[4] for r in rows], rtol=1e-6)
    np.testing.assert_array_equal(out["env_ids"], [r[5] for r in rows])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_nstep_matches_the_definition_on_random_rollouts(n):
    rollouts = random_rollouts(seed=16, T=8, N=12, count=4)
    # Every later rollout has terminations, truncations, ends on its last row and starts on an autoreset step.
    assert all(covers_every_case(ro["terminated"], ro["truncated"], ro["valid"]) for ro in rollouts[1:])
    writer = NStepWriter(n=n, gamma=0.9)
    outs = [writer.add(**ro) for ro in rollouts]
    joined = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
    assert_same_rows(joined, reference_nstep(rollouts, n, 0.9))


def resumed_then_two_rollouts_side_by_side(make_writer, rollouts) -> tuple:
    """What a writer emits for rollouts 1 and 2 in one batch (one worker's two rollouts side by
    side), resumed from a checkpoint taken after rollout 0; and what a straight run emits for them."""
    straight = make_writer()
    expected = [straight.add(**ro) for ro in rollouts]
    first = make_writer()
    first.add(**rollouts[0])
    resumed = make_writer()
    resumed.load_state_dict(through_checkpoint(first.state_dict()))
    both = {k: np.concatenate([rollouts[1][k], rollouts[2][k]], axis=0 if k in ("env_ids", "last_obs") else 1)
            for k in rollouts[0]}
    return resumed.add(**both), expected[1:]


def test_nstep_one_environment_twice_in_a_batch_and_resume_from_a_checkpoint():
    rollouts = random_rollouts(seed=11, T=6, N=3, count=3)
    out, expected = resumed_then_two_rollouts_side_by_side(lambda: NStepWriter(n=4, gamma=0.9), rollouts)
    rows = [(o, a, r, no, d, e) for x in expected for o, a, r, no, d, e in
            zip(x["obs"], x["actions"], x["rewards"], x["next_obs"], x["discounts"], x["env_ids"])]
    assert_same_rows(out, rows)


def test_nstep_refuses_rollouts_out_of_order():
    writer = NStepWriter(n=3, gamma=0.9)
    ro = hand_rollouts()[0]
    writer.add(**ro)  # leaves A's last two steps open
    bad = {**ro, "valid": column([0, 1, 1, 1], [1, 1, 0, 1]).astype(bool)}  # A starts on an autoreset step
    with pytest.raises(ValueError, match="autoreset"):
        writer.add(**bad)


# ---------------------------------------------------------------- rate limiter


@pytest.mark.parametrize("min_size, spi, insert_batch, sample_batch, slack", [
    (100, 1.0, 10, 10, 0.0),
    (50, 4.0, 8, 32, 0.0),
    (200, 0.25, 64, 16, 5.0),
    (1, 8.0, 1, 32, 0.0),
    (1000, 0.5, 100, 128, 40.0),
])
def test_rate_limiter_never_deadlocks_and_holds_the_ratio(min_size, spi, insert_batch, sample_batch, slack):
    tolerance = (spi * insert_batch + sample_batch) / 2 + slack  # the smallest accepted, or a little more
    limiter = RateLimiter(min_size=min_size, samples_per_insert=spi, tolerance=tolerance, insert_batch=insert_batch,
                          sample_batch=sample_batch)
    lower, upper = limiter.bounds
    overshoot = spi * (insert_batch - 1)  # the one insert that reaches min_size may pass the upper bound
    rng = np.random.default_rng(0)
    for _ in range(10_000):
        assert limiter.can_insert(insert_batch) or limiter.can_sample(sample_batch)
        if rng.random() < rng.choice([0.2, 0.5, 0.8]):  # either side may run ahead for a while
            n = int(rng.integers(1, insert_batch + 1))
            if limiter.can_insert(n):
                past_min_size = limiter.inserts >= min_size
                limiter.record_insert(n)
                assert limiter.diff <= upper or not past_min_size
        else:
            n = int(rng.integers(1, sample_batch + 1))
            if limiter.can_sample(n):
                limiter.record_sample(n)
        if limiter.inserts >= min_size:
            assert lower <= limiter.diff <= upper + overshoot
    assert limiter.samples > 0
    # Achieved samples per insert: within tolerance / inserts of the target (plus the min_size offset).
    achieved = limiter.samples / limiter.inserts
    assert abs(achieved - spi * (1 - min_size / limiter.inserts)) <= (tolerance + overshoot) / limiter.inserts + 1e-12


def test_rate_limiter_refuses_a_tolerance_that_could_deadlock():
    with pytest.raises(ValueError, match="deadlock"):
        RateLimiter(min_size=10, samples_per_insert=2.0, tolerance=20.9, insert_batch=8, sample_batch=26)
    limiter = RateLimiter(min_size=10, samples_per_insert=2.0, tolerance=21.0, insert_batch=8, sample_batch=26)
    with pytest.raises(ValueError, match="at most 26"):
        limiter.can_sample(27)
    # The bound is tight: just below it, reaching min_size in one insert leaves both sides blocked.
    limiter = RateLimiter(min_size=10, samples_per_insert=1.0, tolerance=10.0, insert_batch=10, sample_batch=10)
    limiter.record_insert(10)
    assert limiter.can_insert(10) or limiter.can_sample(10)
    limiter.tolerance = 9.5
    assert not limiter.can_insert(10) and not limiter.can_sample(10)


def test_rate_limiter_min_size_waiting_time_and_state():
    limiter = RateLimiter(min_size=4, samples_per_insert=1.0, tolerance=2.0, insert_batch=2, sample_batch=2)
    limiter.record_insert(2)
    limiter.record_insert(1)
    # Below min_size: insert only, though diff - 1 = 2 would be within the band [2, 6].
    assert limiter.can_insert(2) and not limiter.can_sample(1)
    limiter.record_insert(1)
    assert limiter.can_sample(2) and limiter.can_insert(2)  # diff = 4, band [2, 6]
    limiter.record_insert(2)
    assert not limiter.can_insert(1)  # diff = 6: at the top
    limiter.waited("insert", 0.25)
    limiter.waited("sample", 0.5)
    limiter.waited("insert", 0.25)
    assert (limiter.insert_wait_s, limiter.sample_wait_s) == (0.5, 0.5)
    restored = RateLimiter(min_size=4, samples_per_insert=1.0, tolerance=2.0, insert_batch=2, sample_batch=2)
    restored.load_state_dict(through_checkpoint(limiter.state_dict()))
    assert (restored.inserts, restored.samples, restored.insert_wait_s) == (6, 0, 0.5)
    assert not restored.can_insert(1) and restored.can_sample(2)
    with pytest.raises(ValueError, match="side"):
        limiter.waited("learner", 1.0)


def test_replay_table_serves_minibatches_only_as_its_rate_limiter_allows():
    """A table holds samples per insert to the limiter's band: no minibatch before min_size, none
    once the learner is `tolerance` items ahead, and no insert (None) once it is as far behind."""
    limiter = dict(min_size=32, samples_per_insert=2.0, tolerance=48.0, insert_batch=16, sample_batch=16)
    table = ReplayTable(capacity=256, obs_dim=3, alpha=0.6, beta_start=0.4, beta_end=1.0, beta_steps=100, seed=0,
                        rate_limiter=limiter)
    rng = np.random.default_rng(0)

    def transitions(n):
        obs = rng.normal(size=(n, 3)).astype(np.float32)
        return {"obs": obs, "actions": np.zeros(n, np.int64), "rewards": np.ones(n, np.float32), "next_obs": obs,
                "discounts": np.full(n, 0.99, np.float32)}

    table.add(transitions(16), np.ones(16))
    assert table.sample(16) is None  # 16 of min_size 32
    table.add(transitions(16), np.ones(16))
    # diff = 2 x 32 = 64, band [64 - 48, 64 + 48]: three minibatches of 16 bring it to 16, no fourth.
    drawn = [table.sample(16) for _ in range(4)]
    assert [d is None for d in drawn] == [False, False, False, True]
    slots, weights, batch, beta = drawn[0]
    assert batch["obs"].shape == (16, 3) and weights.shape == (16,) and beta == pytest.approx(0.4, abs=0.01)
    # each insert of 16 adds 32 to diff: 16 -> 48 -> 80 -> 112 (the top); the fourth is refused
    assert [table.add(transitions(16), np.ones(16)) for _ in range(4)] == [16, 16, 16, None]
    assert table.stats() == {"size": 80, "inserted": 80, "sampled": 48}
    assert table.sample(16) is not None and table.add(transitions(16), np.ones(16)) is None  # 96 + 32 > 112
    assert table.sample(16) is not None and table.add(transitions(16), np.ones(16)) == 16  # 80 + 32 fits


def test_replay_table_drops_priority_updates_for_items_overwritten_since_sampled():
    limiter = dict(min_size=8, samples_per_insert=1.0, tolerance=100.0, insert_batch=8, sample_batch=8)
    table = ReplayTable(capacity=8, obs_dim=1, alpha=1.0, beta_start=0.4, beta_end=1.0, beta_steps=10, seed=0,
                        rate_limiter=limiter)

    def transitions(n):
        obs = np.zeros((n, 1), np.float32)
        return {"obs": obs, "actions": np.zeros(n, np.int64), "rewards": np.zeros(n, np.float32), "next_obs": obs,
                "discounts": np.zeros(n, np.float32)}

    table.add(transitions(8), np.full(8, 1.0))  # items 0-7 in slots 0-7
    table.add(transitions(3), np.full(3, 1.0))  # items 8-10 overwrite slots 0-2
    items, *_ = table.sample(8)
    assert set(items.tolist()) <= set(range(3, 11))  # item numbers of what is stored: 3-7 and 8-10
    table.add(transitions(4), np.full(4, 5.0))  # items 11-14 overwrite slots 3-6 (items 3-6)
    table.update_priorities(np.arange(3, 11), np.full(8, 2.0))
    # slots 3-6 hold items 11-14 and keep their 5.0; items 7-10 (slots 7, 0, 1, 2) get 2.0
    np.testing.assert_allclose(table.sampler.tree.get(np.arange(8)), [2, 2, 2, 5, 5, 5, 5, 2], rtol=1e-5)
