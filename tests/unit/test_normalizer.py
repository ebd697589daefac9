import numpy as np
import pytest

from rlpar.models.modules.normalizer import ObservationNormalizer


def raw_batches(seed=0, dim=3):
    """Batches of different sizes (one of a single observation) whose means lie far apart, so the
    merged variance depends on the spread between batch means, not only on each batch's own."""
    rng = np.random.default_rng(seed)
    sizes = [50, 1, 200, 7, 120]
    return [rng.normal(loc=4.0 * i - 3.0, scale=[0.5, 2.0, 10.0][:dim], size=(n, dim)) for i, n in enumerate(sizes)]


def merged(normalizer, batches):
    for batch in batches:
        normalizer.update(batch.mean(axis=0), batch.var(axis=0), len(batch))
    return normalizer.mean.numpy(), normalizer.var.numpy(), float(normalizer.count)


def test_without_prior_count_equals_numpy_on_all_the_data():
    batches = raw_batches()
    mean, var, count = merged(ObservationNormalizer(3, enabled=True, epsilon=0.0), batches)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(mean, everything.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(var, everything.var(axis=0), rtol=1e-10)
    assert count == len(everything)


def test_prior_count_acts_as_one_light_observation_with_mean_zero_and_variance_one():
    """The initial state (mean 0, var 1, count epsilon) is a pseudo-observation of weight epsilon:
    the statistics are those of the data plus that weight, computed here directly."""
    eps = 1e-4
    batches = raw_batches(seed=1)
    mean, var, count = merged(ObservationNormalizer(3, enabled=True, epsilon=eps), batches)
    x = np.concatenate(batches)
    total = eps + len(x)
    expected_mean = x.sum(axis=0) / total
    spread = eps * (1.0 + expected_mean**2) + ((x - expected_mean) ** 2).sum(axis=0)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-10)
    np.testing.assert_allclose(var, spread / total, rtol=1e-10)
    assert count == pytest.approx(total, rel=1e-12)
    # the pseudo-observation is visible at this precision: ignoring it would not pass
    assert not np.allclose(mean, x.mean(axis=0), rtol=1e-10, atol=0)


def test_splitting_the_data_differently_gives_the_same_statistics():
    x = np.concatenate(raw_batches(seed=2))
    a = merged(ObservationNormalizer(3, enabled=True), [x])
    b = merged(ObservationNormalizer(3, enabled=True), np.array_split(x, [3, 4, 100, 101]))
    for left, right in zip(a, b):
        np.testing.assert_allclose(left, right, rtol=1e-10)


def test_disabled_or_empty_updates_change_nothing():
    batch = raw_batches()[0]
    for normalizer, count in ((ObservationNormalizer(3, enabled=False), len(batch)), (ObservationNormalizer(3, enabled=True), 0)):
        normalizer.update(batch.mean(axis=0), batch.var(axis=0), count)
        assert normalizer.mean.tolist() == [0.0] * 3 and normalizer.var.tolist() == [1.0] * 3
        assert float(normalizer.count) == pytest.approx(1e-4)
