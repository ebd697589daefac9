"""Image observations and factored actions in the models: the CNN encoders, their numpy and torch
acting copies against the learner's torch modules, factorised categoricals (MultiDiscrete,
MultiBinary), and which encoder and acting copy a spec picks or refuses."""

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlpar.envs.spaces import describe_action_space, describe_observation_space
from rlpar.models.modules.cnn import CNNActorCritic
from rlpar.models.acting.numpy_acting import PolicyChoice
from rlpar.models.acting.numpy_cnn import NumpyCNNPolicy
from rlpar.models.acting.numpy_policy import NumpyPolicy
from rlpar.models.acting.numpy_q_policy import NumpyQPolicy
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.models.acting.torch_acting import TorchPolicy, TorchQPolicy

ROOT = Path(__file__).resolve().parents[2]
ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # frame-stacked, channels first
PROCGEN = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)  # channels last
GRID = gym.spaces.Box(0, 255, (5, 5, 3), np.uint8)  # the pixel grid world's
GRAY = gym.spaces.Box(0, 255, (7, 6), np.uint8)  # rank 2: one channel
VECTOR = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
DISCRETE = gym.spaces.Discrete(5)
MULTI_DISCRETE = gym.spaces.MultiDiscrete([2, 3, 4])
MULTI_BINARY = gym.spaces.MultiBinary(4)
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

IMAGES = {"nature-atari": ("nature", ATARI), "impala-procgen": ("impala", PROCGEN), "small-grid": ("small", GRID),
          "small-gray": ("small", GRAY)}


def spec_for(obs_space, action_space, model=PolicySpec, **options):
    return model(**describe_observation_space(obs_space).as_kwargs(), action=describe_action_space(action_space),
                 **options)


def weights_of(module) -> dict:
    return {k: v.numpy() for k, v in module.state_dict().items()}


def pair(spec, acting=NumpyCNNPolicy, seed=0):
    """The learner's module, its heads moved away from their near-zero init, and an acting copy."""
    torch.manual_seed(seed)
    model = spec.build()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith(("encoder.", "trunk.")):
                p.add_(0.3 * torch.randn_like(p))
    policy = acting(spec)
    policy.set_weights(weights_of(model))
    return model, policy


def observations(spec, n, seed=1):
    rng = np.random.default_rng(seed)
    if spec.obs_dtype == "uint8":
        return rng.integers(0, 256, (n, spec.obs_dim), dtype=np.uint8)
    return rng.normal(size=(n, spec.obs_dim)).astype(np.float32)


def noise_for(action, n, seed=2):
    rng = np.random.default_rng(seed)
    if action.factored:
        return rng.random((n, len(action.nvec)))
    return rng.random(n) if action.discrete else rng.standard_normal((n, action.size)).astype(np.float32)


def torch_outputs(model, obs):
    with torch.no_grad():
        return tuple(o.numpy() for o in model.towers(torch.as_tensor(obs)))


# -- the numpy CNN equals torch ---------------------------------------------------------------


@pytest.mark.parametrize("case", list(IMAGES))
def test_numpy_cnn_outputs_match_torch(case):
    encoder, space = IMAGES[case]
    spec = spec_for(space, DISCRETE, encoder=encoder)
    model, policy = pair(spec)
    assert isinstance(model, CNNActorCritic)
    obs = observations(spec, 4)
    out, values = policy.outputs(obs)
    t_out, t_values = torch_outputs(model, obs)
    assert out.dtype == values.dtype == np.float64
    scale = max(np.abs(t_out).max(), np.abs(t_values).max(), 1.0)  # the ResNet's sums grow with depth
    np.testing.assert_allclose(out, t_out, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(values, t_values, rtol=1e-5, atol=1e-5 * scale)
    assert np.abs(out - out[:1]).max() > 1e-3  # different images, different outputs: the test can tell


def test_channels_last_rows_are_read_as_the_same_image():
    """A channels-last row (H, W, C bytes) and the channels-first row of the same image give the
    same outputs: the layout is undone, not merely agreed on by torch and numpy."""
    last = spec_for(PROCGEN, DISCRETE, encoder="impala")
    first = spec_for(gym.spaces.Box(0, 255, (3, 64, 64), np.uint8), DISCRETE, encoder="impala")
    assert last.channels_last and not first.channels_last and last.image_shape == first.image_shape == (3, 64, 64)
    model, policy = pair(last)
    images = observations(last, 3).reshape(3, 64, 64, 3)
    rows_first = images.transpose(0, 3, 1, 2).reshape(3, -1)
    policy_first = NumpyCNNPolicy(first)
    policy_first.set_weights(weights_of(model))
    model_first = first.build()
    model_first.load_state_dict(model.state_dict())
    rows_last = images.reshape(3, -1)
    np.testing.assert_allclose(policy.outputs(rows_last)[0], policy_first.outputs(rows_first)[0], rtol=1e-12)
    np.testing.assert_allclose(torch_outputs(model, rows_last)[0], torch_outputs(model_first, rows_first)[0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("action_space", [DISCRETE, MULTI_DISCRETE, MULTI_BINARY, BOX],
                         ids=["discrete", "multidiscrete", "multibinary", "box"])
def test_cnn_log_probs_and_values_match_torch(action_space):
    spec = spec_for(GRID, action_space, init_log_std=-0.5)
    model, policy = pair(spec)
    obs, noise = observations(spec, 16), noise_for(spec.action, 16)
    actions, logp, values = policy.act(obs, noise)
    t_logp, entropy, t_values = model.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(logp, t_logp.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, t_values.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert torch.isfinite(entropy).all() and entropy.shape == (16,)


# -- factored actions ---------------------------------------------------------------------------


@pytest.mark.parametrize("obs_space", [VECTOR, GRID], ids=["mlp", "cnn"])
@pytest.mark.parametrize("action_space", [MULTI_DISCRETE, MULTI_BINARY], ids=["multidiscrete", "multibinary"])
def test_factored_log_probs_are_sums_of_categoricals(obs_space, action_space):
    spec = spec_for(obs_space, action_space)
    model, policy = pair(spec, acting=type(spec.acting_policy()))
    nvec = spec.action.nvec
    obs, noise = observations(spec, 32), noise_for(spec.action, 32)
    actions, logp, values = policy.act(obs, noise)
    assert actions.shape == (32, len(nvec)) and actions.dtype == np.int64
    assert ((actions >= 0) & (actions < np.array(nvec))).all()
    t_logp, entropy, _ = model.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    out = torch.as_tensor(torch_outputs(model, obs)[0])
    factors = [torch.distributions.Categorical(logits=part) for part in torch.split(out, list(nvec), dim=1)]
    expected_logp = sum(d.log_prob(torch.as_tensor(actions[:, i])) for i, d in enumerate(factors))
    expected_entropy = sum(d.entropy() for d in factors)
    np.testing.assert_allclose(logp, expected_logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t_logp.detach().numpy(), expected_logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy.detach().numpy(), expected_entropy.numpy(), rtol=1e-5, atol=1e-5)


def test_each_factor_is_drawn_as_a_single_categorical_with_its_own_uniform():
    """Bit for bit the single-categorical maths, factor by factor."""
    spec = spec_for(VECTOR, MULTI_DISCRETE)
    _, policy = pair(spec, acting=NumpyPolicy)
    obs, noise = observations(spec, 64), noise_for(spec.action, 64)
    out, values = policy.outputs(obs)
    actions, logp, _ = policy.choose((out, values), noise)
    start, total = 0, np.zeros(64)
    for i, n in enumerate(spec.action.nvec):
        single = PolicyChoice(describe_action_space(gym.spaces.Discrete(n)))
        a, lp, _ = single.choose((out[:, start:start + n], values), noise[:, i])
        np.testing.assert_array_equal(actions[:, i], a)
        total += single.choose((out[:, start:start + n], values), noise[:, i])[1].astype(np.float64)
        start += n
    np.testing.assert_allclose(logp, total, rtol=1e-6)


def test_factored_draws_follow_each_factors_probabilities_and_greedy_takes_each_argmax():
    spec = spec_for(VECTOR, MULTI_DISCRETE)
    model, policy = pair(spec, acting=NumpyPolicy)
    obs = np.tile(observations(spec, 1), (20000, 1))
    actions, _, _ = policy.act(obs, noise_for(spec.action, 20000, seed=3))
    logits = torch.as_tensor(torch_outputs(model, obs[:1])[0][0])
    greedy, _, _ = policy.act(obs[:1], None)
    for i, part in enumerate(torch.split(logits, list(spec.action.nvec))):
        probs = torch.softmax(part, 0).numpy()
        np.testing.assert_allclose(np.bincount(actions[:, i], minlength=len(probs)) / len(actions), probs, atol=0.015)
        assert greedy[0, i] == probs.argmax()


@pytest.mark.parametrize("obs_space", [VECTOR, GRID], ids=["mlp", "cnn"])
def test_greedy_factored_and_discrete_actions_are_the_argmax(obs_space):
    for action_space in (DISCRETE, MULTI_BINARY):
        spec = spec_for(obs_space, action_space)
        model, policy = pair(spec, acting=type(spec.acting_policy()))
        obs = observations(spec, 8)
        greedy, logp, values = policy.act(obs, None)
        logits = torch_outputs(model, obs)[0]
        if spec.action.factored:
            logits = logits.reshape(8, len(spec.action.nvec), -1)
        np.testing.assert_array_equal(greedy, logits.argmax(-1))
        np.testing.assert_allclose(values, torch_outputs(model, obs)[1], rtol=1e-5, atol=1e-6)


# -- batch size never changes a result ----------------------------------------------------------


@pytest.mark.parametrize("case", ["nature-atari", "impala-procgen", "small-grid", "mlp-multidiscrete"])
def test_numpy_acting_results_do_not_depend_on_the_batch(case):
    """The same rows alone, in pairs, or in a batch of 8 give bit-identical float32 results, so
    batches are the same however the environments are split over workers."""
    if case == "mlp-multidiscrete":
        spec = spec_for(VECTOR, MULTI_DISCRETE)
    else:
        encoder, space = IMAGES[case]
        spec = spec_for(space, MULTI_BINARY, encoder=encoder, acting="numpy")
    _, policy = pair(spec, acting=type(spec.acting_policy()))
    obs, noise = observations(spec, 8), noise_for(spec.action, 8)
    together = policy.act(obs, noise)
    for sizes in ([1] * 8, [3, 5]):
        cuts = np.cumsum(sizes)[:-1]
        parts = [policy.act(o, n) for o, n in zip(np.split(obs, cuts), np.split(noise, cuts))]
        for whole, split in zip(together, (np.concatenate(p) for p in zip(*parts))):
            assert whole.dtype == split.dtype and whole.dtype in (np.float32, np.int64)
            np.testing.assert_array_equal(whole, split)


# -- MLP on image bytes -------------------------------------------------------------------------


def test_an_mlp_on_image_bytes_scales_them_to_unit_range_in_numpy_and_torch():
    pixels = spec_for(GRID, DISCRETE, encoder="mlp")
    floats = PolicySpec(obs_dim=pixels.obs_dim, action=pixels.action)  # the same MLP on float rows
    model, policy = pair(pixels, acting=NumpyPolicy)
    float_model = floats.build()
    float_model.load_state_dict(model.state_dict())
    obs = observations(pixels, 8)
    out, values = policy.outputs(obs)
    np.testing.assert_allclose(out, torch_outputs(model, obs)[0], rtol=1e-5, atol=1e-6)
    scaled = obs.astype(np.float32) / 255
    np.testing.assert_allclose(torch_outputs(model, obs)[0], torch_outputs(float_model, scaled)[0], rtol=1e-5,
                               atol=1e-6)


# -- Q-networks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("encoder,space", [("nature", ATARI), ("small", GRID)], ids=["nature", "small"])
@pytest.mark.parametrize("dueling", [False, True], ids=["linear", "dueling"])
def test_numpy_and_torch_cnn_q_copies_match_the_q_network(encoder, space, dueling):
    spec = spec_for(space, DISCRETE, model=QNetworkSpec, encoder=encoder, dueling=dueling)
    torch.manual_seed(0)
    model = spec.build()
    assert "encoder.fc.weight" in model.state_dict() and not any(k.startswith("trunk.") for k in model.state_dict())
    obs = observations(spec, 6)
    with torch.no_grad():
        q = model(torch.as_tensor(obs)).numpy()
    for copy in (NumpyQPolicy(spec), TorchQPolicy(spec)):
        copy.set_weights({**weights_of(model), "epsilon": np.float64(0.0)})
        np.testing.assert_allclose(copy.outputs(obs)[0], q, rtol=1e-5, atol=1e-6)
        actions, _, values = copy.act(obs, noise_for(spec.action, 6))
        np.testing.assert_array_equal(actions, q.argmax(1))
        np.testing.assert_allclose(values, q.max(1), rtol=1e-5, atol=1e-6)


def test_a_q_network_refuses_factored_actions_naming_the_algorithms_that_take_them():
    for space in (MULTI_DISCRETE, MULTI_BINARY):
        with pytest.raises(ValueError) as err:
            spec_for(VECTOR, space, model=QNetworkSpec)
        assert str(err.value) == ("a Q-network needs one Discrete action space; MultiDiscrete/MultiBinary actions "
                                  "train with algo=ppo, a2c, impala, appo or a3c")


# -- which encoder and which acting copy ---------------------------------------------------------


def test_encoder_and_acting_copy_chosen_for_each_observation():
    car_racing = gym.spaces.Box(0, 255, (96, 96, 3), np.uint8)
    chosen = {name: spec_for(space, DISCRETE) for name, space in
              (("atari", ATARI), ("car_racing", car_racing), ("grid", GRID), ("gray", GRAY), ("vector", VECTOR))}
    assert {k: s.chosen_encoder for k, s in chosen.items()} == {
        "atari": "nature", "car_racing": "nature", "grid": "small", "gray": "small", "vector": "mlp"}
    assert chosen["car_racing"].channels_last and chosen["car_racing"].image_shape == (3, 96, 96)
    assert type(chosen["car_racing"].build()).__name__ == "CNNActorCritic"  # not a 27,648-input MLP
    assert type(chosen["vector"].build()).__name__ == "ActorCritic"
    # acting: torch for the large CNNs (measured in numpy_cnn.py), numpy otherwise or when asked
    assert {k: type(s.acting_policy()).__name__ for k, s in chosen.items()} == {
        "atari": "TorchPolicy", "car_racing": "TorchPolicy", "grid": "NumpyCNNPolicy", "gray": "NumpyCNNPolicy",
        "vector": "NumpyPolicy"}
    assert type(spec_for(ATARI, DISCRETE, acting="numpy").acting_policy()) is NumpyCNNPolicy
    assert type(spec_for(GRID, DISCRETE, acting="torch").acting_policy()) is TorchPolicy
    assert type(spec_for(ATARI, DISCRETE, model=QNetworkSpec).acting_policy()) is TorchQPolicy
    assert type(spec_for(GRID, DISCRETE, model=QNetworkSpec).acting_policy()) is NumpyQPolicy
    assert spec_for(GRID, DISCRETE, encoder="impala").chosen_encoder == "impala"


@pytest.mark.parametrize("options,space,message", [
    ({"encoder": "nature"}, GRID, "encoder 'nature' needs images of at least 36x36 pixels, these are 5x5"),
    ({"encoder": "small"}, VECTOR, "encoder 'small' is a CNN for image observations; these are vectors"),
    ({"encoder": "resnet"}, GRID, "encoder 'resnet' is not one of auto, mlp, nature, impala, small"),
    ({"acting": "jax"}, GRID, "acting 'jax' is not one of auto, numpy, numpy32, torch"),
    ({"acting": "torch"}, VECTOR, "acting=torch is for CNN encoders"),
    ({"normalize_obs": True}, GRID, "image observations are scaled to [0, 1] by the network"),
])
def test_refusals_say_what_is_wrong_in_one_line(options, space, message):
    for model in (PolicySpec, QNetworkSpec):
        with pytest.raises(ValueError) as err:
            spec_for(space, DISCRETE, model=model, **options)
        assert message in str(err.value) and "\n" not in str(err.value)


def test_torch_acting_copy_matches_the_numpy_one():
    spec = spec_for(ATARI, MULTI_DISCRETE)
    model, numpy_copy = pair(spec)
    torch_copy = TorchPolicy(spec)
    torch_copy.set_weights(weights_of(model))
    obs, noise = observations(spec, 4), noise_for(spec.action, 4)
    for ours, theirs in zip(torch_copy.outputs(obs), numpy_copy.outputs(obs)):
        assert ours.dtype == np.float64
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(torch_copy.act(obs, noise)[0], numpy_copy.act(obs, noise)[0])


def test_central_inference_runs_the_cnn_on_image_bytes():
    from rlpar.sampling.inference import InferencePolicy

    spec = spec_for(GRID, MULTI_BINARY)
    model, numpy_copy = pair(spec)
    server = InferencePolicy(policy_spec=spec, backend="torch")
    server.set_weights(weights_of(model))
    obs, noise = observations(spec, 6), noise_for(spec.action, 6)
    served, local = server.act_raw(obs, noise), numpy_copy.act_raw(obs, noise)
    assert served[0].dtype == np.uint8
    np.testing.assert_array_equal(served[0], obs)  # images are never whitened
    np.testing.assert_array_equal(served[1], local[1])
    np.testing.assert_allclose(served[2], local[2], rtol=1e-5, atol=1e-5)


def test_a_numpy_cnn_worker_never_imports_torch(tmp_path):
    spec = spec_for(GRID, DISCRETE)
    model, _ = pair(spec)
    np.savez(tmp_path / "weights.npz", **weights_of(model))
    script = (
        "import sys, numpy as np, gymnasium as gym\n"
        "from rlpar.envs.spaces import describe_action_space, describe_observation_space\n"
        "from rlpar.models.spec import PolicySpec\n"
        "from rlpar.models.q_spec import QNetworkSpec\n"
        "space = gym.spaces.Box(0, 255, (5, 5, 3), np.uint8)\n"
        "action = describe_action_space(gym.spaces.Discrete(5))\n"
        "spec = PolicySpec(**describe_observation_space(space).as_kwargs(), action=action)\n"
        f"policy = spec.acting_policy(); policy.set_weights(dict(np.load({str(tmp_path / 'weights.npz')!r})))\n"
        "policy.act(np.zeros((2, 75), np.uint8), np.full(2, 0.5))\n"
        "QNetworkSpec(obs_dim=75, action=spec.action, obs_dtype='uint8', image_shape=(3, 5, 5)).acting_policy()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
