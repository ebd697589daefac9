"""SEED-style central inference on one machine (the Ray transport: test_distributed.py)."""

import os
import signal

import numpy as np
import pytest
import torch

from rlpar.config.validate import ConfigError, validate_config
from rlpar.envs.spaces import ActionInfo
from rlpar.models.q_spec import QNetworkSpec
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import build_trainer
from rlpar.sampling.inference import InferencePolicy
from tests.processes import running
from tests.unit.test_samplers import assert_first_iteration_matches_local, first_batch

CENTRAL = ("parallel.inference=central", "parallel.sync_mode=blocking")
ALGOS = {
    "ppo": ("algo.rollout_length=32", "algo.minibatch_size=64"),
    "a2c": (),
    "impala": ("algo.rollout_length=16",),
    "appo": ("algo.rollout_length=16", "algo.minibatch_size=64"),
    "dqn": ("algo.rollout_length=16", "algo.learning_starts=64"),
}


@pytest.mark.slow
@pytest.mark.parametrize("algo", list(ALGOS))
def test_central_first_batch_is_bitwise_the_local_one(make_cfg, tmp_path, algo):
    """The server runs the workers' numpy maths on a CPU: not close, equal, for every algorithm."""
    common = (f"algo={algo}", *ALGOS[algo], *CENTRAL)
    local, _ = first_batch(make_cfg, tmp_path, "local", *common, "workers=1", "envs_per_worker=8")
    central, metrics = first_batch(make_cfg, tmp_path, "central", *common, "parallel=multiprocess", "workers=4",
                                   "envs_per_worker=2")
    for field in ("obs", "actions", "logp", "values", "rewards", "valid", "bootstrap_value", "last_obs"):
        np.testing.assert_array_equal(getattr(local, field), getattr(central, field), err_msg=field)
    assert metrics["inference_batches"] > 0


@pytest.mark.slow
def test_central_multiprocess_metrics_match_local_with_normalised_observations(make_cfg, tmp_path):
    """Pendulum normalises observations on the server; its first row is local's."""
    common = ("env=pendulum", "algo.rollout_length=64", *CENTRAL)
    metrics = assert_first_iteration_matches_local(make_cfg, tmp_path, common, "multiprocess")
    # every request of the rollout, answered in batches: 64 steps and a bootstrap, 8 environments
    assert metrics["inference_batches"] * metrics["inference_batch_mean"] == pytest.approx(65 * 8)
    assert 65 <= metrics["inference_batches"] <= 4 * 65


def test_server_batches_every_worker_it_hears_within_the_wait(make_cfg, tmp_path):
    """A long wait: the workers step in lockstep, so each forward pass answers all of them."""
    trainer = build_trainer(make_cfg("parallel=multiprocess", "workers=2", "envs_per_worker=3", *CENTRAL,
                                     "parallel.inference_wait_ms=200", "algo.rollout_length=16", run_dir=tmp_path / "b"))
    try:
        trainer.train()  # warm-up: a worker's first request may come late
        rows = [trainer.train() for _ in range(3)]
    finally:
        trainer.close()
    assert [r["inference_batch_mean"] for r in rows] == [6.0] * 3
    assert [r["inference_batches"] for r in rows] == [17] * 3


def test_killed_worker_is_replaced_and_reconnects_to_the_server(make_cfg, tmp_path):
    trainer = build_trainer(make_cfg("parallel=multiprocess", "workers=3", "envs_per_worker=2", *CENTRAL,
                                     "algo.rollout_length=16", run_dir=tmp_path / "kill"))
    try:
        trainer.train()
        victim = trainer.sampler.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        rows = [trainer.train() for _ in range(5)]
        assert not running(victim)
    finally:
        trainer.close()
    assert rows[-1]["worker_restarts"] == 1 and rows[-1]["live_workers"] == 3
    assert rows[-1]["batches_this_iter"] == 3  # the replacement samples through its new doorbell
    assert rows[-1]["inference_batch_mean"] > 2  # and its requests are batched with the others'


def test_close_leaves_no_thread_process_or_shared_memory(make_cfg, tmp_path):
    """Non-blocking: workers are waiting for actions when the run closes, and must not linger."""
    from multiprocessing import shared_memory

    trainer = build_trainer(make_cfg("algo=impala", "parallel=multiprocess", "workers=2", "envs_per_worker=2",
                                     "parallel.inference=central", "parallel.sync_mode=non_blocking",
                                     run_dir=tmp_path / "c"))
    assert trainer.sampler.sync_mode == "non_blocking"
    trainer.train()
    server = trainer.sampler.inference
    names = list(server.names.values())
    processes = list(trainer.sampler.processes)
    trainer.close()
    assert not server.thread.is_alive()
    assert [p.exitcode for p in processes] == [0, 0]  # each left by itself: none killed after its 5 s of grace
    for name in names:
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)


@pytest.mark.parametrize("spec", [
    PolicySpec(obs_dim=4, action=ActionInfo(discrete=True, size=3), hidden_sizes=(32, 32), normalize_obs=True),
    PolicySpec(obs_dim=3, action=ActionInfo(discrete=False, size=2, low=-2.0, high=2.0), hidden_sizes=(16,)),
    QNetworkSpec(obs_dim=4, action=ActionInfo(discrete=True, size=2), hidden_sizes=(32,), dueling=True),
], ids=["categorical", "gaussian", "q-network"])
def test_torch_server_policy_acts_like_the_numpy_one(spec):
    """What `hardware=gpu` runs (the torch module, then the numpy action choice), here on the CPU."""
    torch.manual_seed(0)
    module = spec.build()
    weights = {k: v.numpy().copy() for k, v in module.state_dict().items()}
    if spec.normalize_obs:
        weights["obs_normalizer.mean"][:] = 0.5
        weights["obs_normalizer.var"][:] = 4.0
    if isinstance(spec, QNetworkSpec):
        weights["epsilon"] = np.float64(0.3)
    numpy_side, torch_side = InferencePolicy(policy_spec=spec), InferencePolicy(policy_spec=spec, backend="torch")
    for policy in (numpy_side, torch_side):
        policy.set_weights(weights)
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((256, spec.obs_dim)).astype(np.float32)
    noise = rng.random(256) if spec.action.discrete else rng.standard_normal((256, spec.action.size)).astype(np.float32)
    expected, got = numpy_side.act_raw(raw, noise), torch_side.act_raw(raw, noise)
    np.testing.assert_array_equal(expected[0], got[0])  # normalised observations
    assert np.mean(expected[1] == got[1]) > 0.99 if spec.action.discrete else np.allclose(expected[1], got[1], atol=1e-5)
    np.testing.assert_allclose(expected[2], got[2], atol=1e-4)
    np.testing.assert_allclose(expected[3], got[3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algo", ["a3c", "async_dqn", "apex"])
def test_central_inference_is_refused_for_workers_that_do_more_than_step(make_cfg, tmp_path, algo):
    with pytest.raises(ConfigError) as err:
        validate_config(make_cfg(f"algo={algo}", "parallel=multiprocess", "parallel.inference=central"), check_env=False)
    assert any(p.startswith("parallel.inference: central needs workers that only step environments") for p in err.value.problems)


# -- recurrent policies: the server keeps the states -------------------------------------------

RECURRENT = ("env.id=rlpar/MemoryCue-v0", "+env.kwargs.delay=2", "model.recurrent=lstm", "model.recurrent_size=16",
             "algo.rollout_length=9", "algo.minibatch_size=36", "algo.epochs=1", "parallel.sync_mode=blocking")
BATCH_FIELDS = ("obs", "actions", "logp", "values", "rewards", "valid", "states", "bootstrap_value", "last_obs")


def recurrent_batches(make_cfg, tmp_path, name, *overrides):
    """Two rollouts with the first weights (the second starts where the bootstrap call of the
    first left off), then a rollout with the weights of one update."""
    trainer = build_trainer(make_cfg(*RECURRENT, *overrides, run_dir=tmp_path / name))
    try:
        algorithm = trainer.algorithm
        batches = [algorithm.sampler.sample(algorithm.get_weights(), algorithm.version).copy() for _ in range(2)]
        trainer.train()
        batches.append(algorithm.sampler.sample(algorithm.get_weights(), algorithm.version).copy())
        metrics = algorithm.sampler.metrics()
    finally:
        trainer.close()
    return batches, metrics


def assert_same_batches(expected, got):
    for k, (a, b) in enumerate(zip(expected, got, strict=True)):
        for field in BATCH_FIELDS:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=f"rollout {k}: {field}")


@pytest.mark.slow
def test_recurrent_central_batches_are_the_workers_own(make_cfg, tmp_path):
    """MemoryCue's 4-step episodes reset the state every few steps: the server's states, the
    reset rule and the bootstrap call that must not move them give exactly the batches, stored
    states included, of workers acting themselves (numpy float64 both sides)."""
    layout = ("parallel=multiprocess", "workers=3", "envs_per_worker=2")
    worker, _ = recurrent_batches(make_cfg, tmp_path, "worker", *layout)
    central, metrics = recurrent_batches(make_cfg, tmp_path, "central", *layout, "parallel.inference=central")
    assert worker[0].states.shape == (9, 6, 32) and np.abs(worker[2].states).max() > 0
    assert (~worker[0].valid).sum() >= 6  # every environment reset at least once in a rollout
    assert_same_batches(worker, central)
    assert metrics["inference_batches"] > 0



@pytest.mark.slow
def test_recurrent_central_torch_backend_follows_the_workers(make_cfg, tmp_path):
    """`parallel.inference_backend=torch` (the GPU path, here on the CPU): float32 states on the
    server, within rounding of the workers' float64 ones. MemoryCue's observations do not depend
    on the actions, so the rollouts stay comparable even where a rounding flips an action."""
    layout = ("parallel=multiprocess", "workers=3", "envs_per_worker=2")
    worker, _ = recurrent_batches(make_cfg, tmp_path, "worker", *layout)
    central, _ = recurrent_batches(make_cfg, tmp_path, "torch", *layout, "parallel.inference=central",
                                   "parallel.inference_backend=torch")
    for a, b in zip(worker, central, strict=True):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_allclose(a.states, b.states, atol=1e-5)
        np.testing.assert_allclose(a.values, b.values, atol=1e-5)
        np.testing.assert_allclose(a.bootstrap_value, b.bootstrap_value, atol=1e-5)
    assert np.abs(central[1].states).max() > 0.01

@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_torch_server_keeps_recurrent_states_like_the_numpy_one(core):
    """The GPU path (`inference_backend=torch`) with a recurrent module, here on the CPU: over steps
    with resets and a bootstrap call in between, its states and outputs follow the numpy server's."""
    from rlpar.sampling.inference_states import ClientStates

    spec = PolicySpec(obs_dim=4, action=ActionInfo(discrete=True, size=3), hidden_sizes=(16,), recurrent=core,
                      recurrent_size=8)
    torch.manual_seed(0)
    weights = {k: v.numpy().copy() for k, v in spec.build().state_dict().items()}
    servers = {backend: InferencePolicy(policy_spec=spec, backend=backend, num_envs=6) for backend in ("numpy", "torch")}
    rng = np.random.default_rng(0)
    clients = {backend: ClientStates() for backend in servers}
    arrays = {backend: np.zeros((6, spec.state_size)) for backend in servers}
    rows = np.arange(6)
    for step in range(12):
        raw, noise = rng.standard_normal((6, 4)).astype(np.float32), rng.random(6)
        resets = rng.random(6) < 0.2
        replies = {}
        for backend, server in servers.items():
            server.set_weights(weights)
            state = arrays[backend]
            state[resets] = 0.0
            if step % 4 == 3:  # a bootstrap: the next call starts from the same state again
                state = state.copy()
            codes, values = clients[backend].request(state)
            *replies[backend], next_state = server.answer(raw, noise, rows, codes, values)
            clients[backend].replied(state, next_state)
        np.testing.assert_allclose(arrays["torch"], arrays["numpy"], atol=1e-5)
        assert np.abs(arrays["numpy"]).max() > 0.01
        np.testing.assert_allclose(replies["torch"][3], replies["numpy"][3], atol=1e-5)  # values
        assert np.mean(replies["torch"][1] == replies["numpy"][1]) > 0.8  # actions


def test_client_sends_only_what_the_server_does_not_hold():
    """Codes per row: the state the server holds, zeros, its previous entering state, or values."""
    from rlpar.sampling.inference_states import CONTINUE, REPEAT, SET, ZERO, ClientStates, ServerStates

    client, server, rows = ClientStates(), ServerStates(2), np.arange(3, 7)
    state = np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [3.0, 4.0]])
    codes, values = client.request(state)
    assert codes.tolist() == [ZERO, SET, ZERO, SET] and values.tolist() == [[1, 2], [3, 4]]
    entering = server.enter(rows, codes, values)
    np.testing.assert_array_equal(entering, state)
    server.keep(rows, entering + 10.0)
    client.replied(state, entering + 10.0)
    np.testing.assert_array_equal(state[1], [11.0, 12.0])  # the worker's array advanced in place
    state[2] = 0.0  # a reset
    state[3] = [3.0, 4.0]  # back to what entered the last step (a rollout after its bootstrap call)
    state[0] = [5.0, 6.0]  # anything else (a restored checkpoint)
    codes, values = client.request(state)
    assert codes.tolist() == [SET, CONTINUE, ZERO, REPEAT] and values.tolist() == [[5, 6]]
    np.testing.assert_array_equal(server.enter(rows, codes, values), state)
    with pytest.raises(RuntimeError, match="holds no recurrent state"):  # a restarted server
        ServerStates(2).enter(rows, codes, values)
