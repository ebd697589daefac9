"""`model.acting=numpy32`: the float32 numpy acting copies against the float64 ones (same weights),
every copy's values without actions (`value_raw`) against its acting, the key's validation, a
short local run acting in float32, and the row-by-row categorical draw (shared by both copies)
against the reductions it replaces."""

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.spaces import describe_action_space, describe_observation_space, draw_noise
from rlpar.models.actor_q_spec import ActorQSpec
from rlpar.models.acting.numpy_acting import categorical
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import build_trainer

VECTOR = gym.spaces.Box(-2.0, 2.0, (6,), np.float32)
GRID = gym.spaces.Box(0, 255, (5, 5, 3), np.uint8)


def spec_for(model, obs_space, action_space, **options):
    return model(**describe_observation_space(obs_space).as_kwargs(), action=describe_action_space(action_space),
                 **options)


SPECS = {
    "categorical-3": spec_for(PolicySpec, VECTOR, gym.spaces.Discrete(3), activation="relu", normalize_obs=True),
    "categorical-7": spec_for(PolicySpec, VECTOR, gym.spaces.Discrete(7)),
    "multi-discrete": spec_for(PolicySpec, VECTOR, gym.spaces.MultiDiscrete([2, 3, 4]), activation="elu"),
    "gaussian": spec_for(PolicySpec, VECTOR, gym.spaces.Box(-1.0, 1.0, (3,), np.float32), init_log_std=-0.5),
    "pixels-mlp": spec_for(PolicySpec, GRID, gym.spaces.Discrete(5), encoder="mlp", hidden_sizes=(32, 16, 24)),
    "no-hidden-layer": spec_for(PolicySpec, VECTOR, gym.spaces.Discrete(2), hidden_sizes=()),
    "centralised-critic": spec_for(PolicySpec, VECTOR, gym.spaces.Discrete(4), actor_inputs=4, value_norm=True),
    "small-cnn": spec_for(PolicySpec, GRID, gym.spaces.Discrete(5)),
    "dueling-q": spec_for(QNetworkSpec, VECTOR, gym.spaces.Discrete(4), dueling=True),
    "sac-actor": spec_for(ActorQSpec, VECTOR, gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
    "td3-actor": spec_for(ActorQSpec, VECTOR, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gaussian=False),
}


def copies(spec):
    """The float64 (`numpy`) and float32 (`numpy32`) acting copies, with the same weights: the
    learner module's, moved away from their near-zero initial outputs."""
    torch.manual_seed(0)
    module = spec.build()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    weights = {k: v.numpy() for k, v in module.state_dict().items()}
    if "value_normalizer.mean" in weights:  # returns' statistics that do something
        weights["value_normalizer.mean"] = np.full_like(weights["value_normalizer.mean"], 3.0)
        weights["value_normalizer.var"] = np.full_like(weights["value_normalizer.var"], 9.0)
    if "obs_normalizer.mean" in weights:  # whitening that does something
        weights["obs_normalizer.mean"] = np.full_like(weights["obs_normalizer.mean"], 0.5)
        weights["obs_normalizer.var"] = np.full_like(weights["obs_normalizer.var"], 4.0)
    policies = []
    for acting in ("numpy", "numpy32"):
        policy = dataclasses.replace(spec, acting=acting).acting_policy()
        policy.set_weights(weights)
        policies.append(policy)
    return policies


@pytest.mark.parametrize("name", list(SPECS))
def test_float32_copy_acts_as_the_float64_one_to_float32_rounding(name):
    spec = SPECS[name]
    double, single = copies(spec)
    rng = np.random.default_rng(1)
    rows = 256
    if spec.obs_dtype == "uint8":
        raw = rng.integers(0, 256, (rows, spec.obs_dim)).astype(np.uint8)
    else:
        raw = rng.normal(0.0, 1.5, (rows, spec.obs_dim)).astype(np.float32)
    noise = draw_noise(rng, spec.action, rows)
    noise = noise.astype(np.float32) if not spec.action.discrete else noise

    out64, out32 = double.outputs(double.normalize(raw)), single.outputs(single.normalize(raw))
    assert double.dtype == np.float64 and single.dtype == np.float32
    for a, b in zip(out64, out32):
        if a is None:
            continue
        assert a.dtype == np.float64 and b.dtype == np.float32  # the arithmetic each copy was asked for
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)
        assert np.abs(a).max() > 0.05  # outputs that say something

    obs64, actions64, logp64, values64 = double.act_raw(raw, noise)
    obs32, actions32, logp32, values32 = single.act_raw(raw, noise.astype(single.dtype))
    np.testing.assert_array_equal(obs32, obs64)  # what a batch records: float32 rows either way
    same = (actions32 == actions64).reshape(rows, -1).all(axis=1) if spec.action.discrete else np.ones(rows, bool)
    assert same.mean() >= 0.99  # a draw flips only for a uniform within float32 rounding of the CDF
    np.testing.assert_allclose(np.asarray(actions32, np.float64)[same], np.asarray(actions64, np.float64)[same],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logp32[same], logp64[same], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(values32, values64, rtol=1e-4, atol=1e-4)
    assert logp32.dtype == values32.dtype == np.float32


@pytest.mark.parametrize("name", list(SPECS))
def test_value_raw_gives_the_observations_and_values_act_raw_gives(name):
    """A rollout's bootstrap asks `value_raw` (no action chosen): the numbers `act_raw` returns."""
    spec = SPECS[name]
    rng = np.random.default_rng(2)
    raw = (rng.integers(0, 256, (16, spec.obs_dim)).astype(np.uint8) if spec.obs_dtype == "uint8"
           else rng.normal(0.0, 1.5, (16, spec.obs_dim)).astype(np.float32))
    for policy in copies(spec):
        noise = draw_noise(rng, spec.action, 16).astype(policy.dtype if spec.action.discrete else np.float32)
        obs, _, _, values = policy.act_raw(raw, noise)
        value_obs, value = policy.value_raw(raw)
        np.testing.assert_array_equal(value_obs, obs)
        np.testing.assert_array_equal(value, values)
        assert value.dtype == np.float32


def test_default_acting_stays_float64():
    for spec in SPECS.values():
        if spec.chosen_acting == "numpy":
            assert spec.acting_policy().dtype == np.float64


@pytest.mark.parametrize("overrides", [("model.acting=numpy32",), ("algo=dqn", "model.acting=numpy32"),
                                       ("algo=sac", "env=pendulum", "model.acting=numpy32")])
def test_numpy32_is_accepted_for_feed_forward_models(make_cfg, overrides):
    validate_config(make_cfg(*overrides))


@pytest.mark.parametrize("overrides,message", [
    (("model.acting=numpy32", "model.recurrent=gru"),
     "model: acting=numpy32 is for feed-forward networks; a recurrent one acts in float64 (acting=numpy)"),
    (("model.acting=float32",), "model.acting: 'float32' is not one of auto, numpy, numpy32, torch"),
])
def test_numpy32_refusals_are_one_line(make_cfg, overrides, message):
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg(*overrides))
    assert message in err.value.problems


def test_local_run_acts_in_float32_and_learns_as_in_float64(make_cfg, tmp_path):
    """The first rollout and iterations of a float32-acting run: the same actions and episodes as
    the float64 run's (a draw would flip only for a uniform within float32 rounding of the CDF),
    log-probabilities and values to float32 rounding, and so the same losses (finite)."""
    rows, batches = {}, {}
    for acting in ("numpy", "numpy32"):
        trainer = build_trainer(make_cfg(f"model.acting={acting}", "workers=1", "envs_per_worker=4",
                                         "algo.rollout_length=32", "checkpoint.every=0", run_dir=tmp_path / acting))
        try:
            algorithm = trainer.algorithm
            assert algorithm.sampler.worker.policy.dtype == (np.float32 if acting == "numpy32" else np.float64)
            batches[acting] = algorithm.sampler.sample(algorithm.get_weights(), algorithm.version).copy()
            rows[acting] = [trainer.train() for _ in range(2)]
        finally:
            trainer.close()
    double, single = batches["numpy"], batches["numpy32"]
    for field in ("obs", "actions", "rewards", "valid", "last_obs"):
        np.testing.assert_array_equal(getattr(single, field), getattr(double, field), err_msg=field)
    assert single.episode_ends == double.episode_ends and single.episode_ends
    for field in ("logp", "values", "bootstrap_value"):
        np.testing.assert_allclose(getattr(single, field), getattr(double, field), rtol=1e-5, atol=1e-6, err_msg=field)
    for double, single in zip(rows["numpy"], rows["numpy32"]):
        assert single["env_steps"] == double["env_steps"] == double["iteration"] * 4 * 32
        assert single["episodes"] == double["episodes"]
        for key in ("loss_policy", "loss_value", "loss_entropy", "approx_kl"):
            assert math.isfinite(single[key])
            assert single[key] == pytest.approx(double[key], rel=1e-3, abs=1e-5), key


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("choices", [2, 3, 4])
def test_row_by_row_draw_gives_the_numbers_of_the_reductions(dtype, choices):
    """A few actions are drawn row by row; the float64 default must keep its exact numbers:
    these are the softmax, inverse CDF and log-probabilities numpy's reductions computed."""
    rng = np.random.default_rng(choices)
    logits = (rng.standard_normal((choices, 500)) * 10.0 ** rng.uniform(-2, 1.5, 500)).astype(dtype)
    logits[:, :50] = logits[0, :50]  # ties
    noise = rng.random(500).astype(dtype)
    noise[:2] = 0.0, np.nextafter(dtype(1.0), dtype(0.0))
    shifted = logits - logits.max(axis=0)
    logp_all = shifted - np.log(np.exp(shifted).sum(axis=0))
    expected = np.minimum((noise > np.cumsum(np.exp(logp_all), axis=0)).sum(axis=0), choices - 1)
    actions, logp = categorical(logits, noise, choices - 1)
    assert actions.dtype == expected.dtype
    np.testing.assert_array_equal(actions, expected)
    np.testing.assert_array_equal(logp, logp_all[expected, np.arange(500)])
    assert len(np.unique(actions)) == choices
