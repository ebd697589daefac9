"""Recurrent policies: the numpy acting copies agree with the torch modules step by step, workers
keep and reset each environment's state as the learner replays it, batches do not depend on how
environments are split over workers, and pieces start from the stored states."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlpar.envs.factory import EnvSpec
from rlpar.envs.spaces import describe_action_space
from rlpar.learning.estimators.sequences import cut_pieces, evaluate_steps, piece_count, piece_tensors, valid_steps
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.sampling.batch import Batch
from rlpar.sampling.rollout import RolloutWorker

DISCRETE = describe_action_space(gym.spaces.Discrete(3))
BOX = describe_action_space(gym.spaces.Box(-1, 1, (2,)))


def weights_of(model) -> dict:
    torch.manual_seed(1)
    for p in model.parameters():  # away from the near-zero head init, so that differences show
        p.data.add_(0.3 * torch.randn_like(p))
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def numpy_unroll(policy, obs, initial_state, valid):
    """The workers' rule, step by step: zero the state entering step t after an autoreset step."""
    state, outputs = initial_state.copy(), []
    for t in range(len(obs)):
        if t:
            state[~valid[t - 1]] = 0.0
        outputs.append(policy.outputs(obs[t], state))
    return [np.stack(parts) for parts in zip(*outputs)], state


SPECS = {
    "lstm-categorical": PolicySpec(obs_dim=4, action=DISCRETE, recurrent="lstm", recurrent_size=8, hidden_sizes=(16,)),
    "gru-gaussian": PolicySpec(obs_dim=4, action=BOX, recurrent="gru", recurrent_size=8, hidden_sizes=(16, 16)),
    "lstm-no-trunk": PolicySpec(obs_dim=4, action=DISCRETE, recurrent="lstm", recurrent_size=8, hidden_sizes=()),
    "gru-small-cnn": PolicySpec(obs_dim=3 * 5 * 5, action=DISCRETE, recurrent="gru", recurrent_size=8,
                                obs_dtype="uint8", image_shape=(3, 5, 5), channels_last=True),
    "lstm-q-dueling": QNetworkSpec(obs_dim=4, action=DISCRETE, recurrent="lstm", recurrent_size=8, hidden_sizes=(16,),
                                   dueling=True),
    "gru-q": QNetworkSpec(obs_dim=4, action=DISCRETE, recurrent="gru", recurrent_size=8, hidden_sizes=(16,)),
}


@pytest.mark.parametrize("name", SPECS)
def test_numpy_copy_follows_the_torch_unroll_with_resets(name):
    spec = SPECS[name]
    model = spec.build()
    policy = spec.acting_policy()
    policy.set_weights(weights_of(model))
    rng = np.random.default_rng(0)
    T, E = 9, 5
    if spec.obs_dtype == "uint8":
        obs = rng.integers(0, 256, (T, E, spec.obs_dim), dtype=np.uint8)
    else:
        obs = rng.normal(size=(T, E, spec.obs_dim)).astype(np.float32)
    valid = rng.random((T, E)) > 0.25
    initial = rng.normal(size=(E, spec.state_size)) * 0.5
    expected, final = numpy_unroll(policy, obs, initial, valid)
    args = (torch.as_tensor(obs), torch.as_tensor(initial, dtype=torch.float32), torch.as_tensor(valid))
    if isinstance(spec, QNetworkSpec):
        q, torch_final = model.q_sequence(*args)
        got = [q]
    else:
        out, values, torch_final = model.sequence_outputs(*args)
        got = [out, values]
    for e, g in zip(expected, got):
        np.testing.assert_allclose(e, g.detach().numpy(), atol=2e-5)
    np.testing.assert_allclose(final, torch_final.detach().numpy(), atol=2e-5)
    assert np.abs(final).max() > 0.01  # the state carries something


def test_a_reset_forgets_and_no_reset_remembers():
    spec = SPECS["lstm-categorical"]
    model = spec.build()
    weights_of(model)
    obs = torch.randn(4, 2, 4)
    state = torch.randn(2, spec.state_size)
    valid = torch.tensor([[True, True], [True, False], [True, True], [True, True]])  # column 1: autoreset at step 1
    out, _, _ = model.sequence_outputs(obs, state, valid)
    fresh, _, _ = model.sequence_outputs(obs[2:, 1:], torch.zeros(1, spec.state_size), None)
    torch.testing.assert_close(out[2:, 1:], fresh)  # column 1 after its reset: as from a zero state
    unreset, _, _ = model.sequence_outputs(obs[2:, :1], torch.zeros(1, spec.state_size), None)
    assert (out[2:, :1] - unreset).abs().max() > 1e-4  # column 0 kept its memory


def worker(spec, num_envs=4, first=0, T=64):
    return RolloutWorker(env_spec=EnvSpec(id="CartPole-v1"), policy_spec=spec, num_envs=num_envs, rollout_length=T,
                         seed=0, first_env_index=first)


CARTPOLE_LSTM = PolicySpec(obs_dim=4, action=describe_action_space(gym.spaces.Discrete(2)), recurrent="lstm",
                           recurrent_size=8, hidden_sizes=(16,))


def test_worker_states_are_what_the_learner_replays_from_any_step():
    model = CARTPOLE_LSTM.build()
    weights = weights_of(model)
    w = worker(CARTPOLE_LSTM)
    w.set_weights(weights, 1)
    for _ in range(2):  # the second rollout starts from the first one's carried states
        batch = w.sample()
        assert batch.states.shape == (64, 4, CARTPOLE_LSTM.state_size) and (~batch.valid).any()
        after_reset = np.zeros_like(batch.valid)
        after_reset[1:] = ~batch.valid[:-1]
        assert (batch.states[after_reset] == 0).all() and np.abs(batch.states[~after_reset]).max() > 0
        for length in (None, 16, 24):
            data = piece_tensors({"obs": batch.obs, "actions": batch.actions, "logp": batch.logp, "values": batch.values},
                                 states=batch.states, valid=batch.valid, length=length, device="cpu")
            logp, _, values = evaluate_steps(model, data)
            torch.testing.assert_close(logp, valid_steps(data["logp"], data["valid"]), atol=1e-5, rtol=0)
            torch.testing.assert_close(values, valid_steps(data["values"], data["valid"]), atol=1e-5, rtol=0)
    w.close()


def test_batches_do_not_depend_on_how_environments_are_split():
    weights = weights_of(CARTPOLE_LSTM.build())
    whole, halves = worker(CARTPOLE_LSTM), [worker(CARTPOLE_LSTM, 2, 0), worker(CARTPOLE_LSTM, 2, 2)]
    for w in (whole, *halves):
        w.set_weights(weights, 1)
    for _ in range(2):
        a, b = whole.sample(), Batch.concat([h.sample() for h in halves])
        for name in ("obs", "actions", "logp", "values", "states", "bootstrap_value"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for w in (whole, *halves):
        w.close()


def test_worker_state_round_trips_through_get_state():
    weights = weights_of(CARTPOLE_LSTM.build())
    w = worker(CARTPOLE_LSTM)
    w.set_weights(weights, 1)
    w.sample()
    saved = w.get_state()
    expected = w.sample()
    restored = worker(CARTPOLE_LSTM)
    restored.set_weights(weights, 1)
    restored.set_state(saved)
    got = restored.sample()
    np.testing.assert_array_equal(got.states, expected.states)
    np.testing.assert_array_equal(got.actions, expected.actions)
    w.close()
    restored.close()


def test_pieces_start_from_stored_states_and_pad_with_invalid_steps():
    T, E, S = 10, 2, 3
    states = np.arange(T * E * S, dtype=np.float32).reshape(T, E, S)
    valid = np.ones((T, E), bool)
    x = np.arange(T * E).reshape(T, E)
    pieces = cut_pieces({"x": x}, states=states, valid=valid, length=4)
    assert piece_count(T, E, 4) == 6 and pieces["x"].shape == (4, 6) and pieces["initial_state"].shape == (6, S)
    np.testing.assert_array_equal(pieces["x"][:, 3], x[4:8, 1])  # piece 3: the second piece of environment 1
    np.testing.assert_array_equal(pieces["initial_state"][3], states[4, 1])
    np.testing.assert_array_equal(pieces["valid"][:, 4], [True, True, False, False])  # the last piece's padding
    whole = cut_pieces({"x": x}, states=states, valid=valid, length=None)
    np.testing.assert_array_equal(whole["x"], x)


@pytest.mark.parametrize("overrides, problem", [
    (("model.recurrent=rnn",), "model.recurrent"),
    (("model.recurrent=lstm", "model.recurrent_size=0"), "model.recurrent_size"),
    (("model.recurrent=lstm", "algo.sequence_length=0"), "algo.sequence_length"),
    (("model.recurrent=lstm", "learners=2", "parallel=distributed"), "learners: 2 learners with model.recurrent"),
])
def test_recurrent_settings_are_validated(make_cfg, overrides, problem):
    from rlpar.config.validate import ConfigError, validate_config

    with pytest.raises(ConfigError) as caught:
        validate_config(make_cfg(*overrides))
    assert problem in str(caught.value)
