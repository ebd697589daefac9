"""IMPALA, APPO and A2C with a recurrent policy (`model.recurrent`): the learner replays each
rollout from its stored state with the resets at episode ends, so before its weights move it
sees exactly what the actors saw; one update moves the weights; IMPALA learns a memory task."""

import json
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

from rlpar.algos.a2c import A2C
from rlpar.algos.appo import APPO
from rlpar.algos.impala import IMPALA
from rlpar.envs.factory import resolve_env_spec
from rlpar.learning.estimators.batch_tensors import vtrace_inputs
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.estimators.sequences import evaluate_steps, piece_tensors
from rlpar.learning.estimators.vtrace import compute_vtrace
from rlpar.models.spec import PolicySpec
from rlpar.runtime.build import probe_policy_spec
from rlpar.runtime.run import run
from rlpar.sampling.rollout import RolloutWorker
from tests.unit.test_a2c import one_torch_thread  # noqa: F401 (autouse: one torch thread, as runs)
from tests.rollouts import LEARNER_ONLY, made

GAMMA = 0.99
TOLERANCE = 1e-5


def make(algo_class, policy_spec, **options):
    """Every learner of a test starts from the same weights (seed 0), those the batch was acted with."""
    return made(algo_class, sampler=LEARNER_ONLY, policy_spec=policy_spec, total_steps=100_000, seed=0, gamma=GAMMA, **options)


@pytest.fixture(scope="module", params=["lstm", "gru"])
def rollout(request):
    """(policy spec, batch): 4 CartPole environments for 32 steps, the first rollout (not the
    environments' first) whose last step is an autoreset step: it starts from states carried
    over, not zeros, has episode ends inside it, and bootstraps an environment from a zero state."""
    make_spec = partial(PolicySpec, recurrent=request.param, recurrent_size=16)
    policy_spec, _ = probe_policy_spec(resolve_env_spec(id="CartPole-v1"), make_spec, normalize_obs=False)
    worker = RolloutWorker(env_spec=resolve_env_spec(id="CartPole-v1"), policy_spec=policy_spec, num_envs=4,
                           rollout_length=32, seed=0)
    try:
        worker.set_weights(make(IMPALA, policy_spec).get_weights(), version=0)
        batch = worker.sample()
        for _ in range(50):
            batch = worker.sample()
            if not batch.valid[-1].all():
                break
    finally:
        worker.close()
    assert batch.terminated.any() and not batch.valid[-1].all() and np.abs(batch.states[0]).max() > 0.01
    return policy_spec, batch


def flat_weights(algo) -> np.ndarray:
    return np.concatenate([w.ravel() for w in algo.get_weights().values()])


@pytest.mark.parametrize("algo_class", [IMPALA, APPO])
def test_vtrace_inputs_replay_what_the_actors_computed(rollout, algo_class):
    """Every step's log-probability and value (autoreset steps included) and the bootstrap value
    of the last observation, from the learner's unroll (the target network's, for APPO)."""
    policy_spec, batch = rollout
    algo = make(algo_class, policy_spec)
    model = getattr(algo, "target_model", algo.model)
    with torch.no_grad():
        inputs, _, _, _ = vtrace_inputs(model, batch, batch.rewards, "cpu")
    np.testing.assert_allclose(inputs["target_logp"], batch.logp, atol=TOLERANCE)
    np.testing.assert_allclose(inputs["values"], batch.values, atol=TOLERANCE)
    np.testing.assert_allclose(inputs["bootstrap_value"], batch.bootstrap_value, atol=TOLERANCE)


def test_zeros_instead_of_the_stored_states_would_be_caught(rollout):
    """The check above can fail: the same rollout unrolled from zero states differs."""
    policy_spec, batch = rollout
    algo = make(IMPALA, policy_spec)
    zeroed = replace(batch, states=np.zeros_like(batch.states))
    with torch.no_grad():
        inputs, _, _, _ = vtrace_inputs(algo.model, zeroed, batch.rewards, "cpu")
    assert np.abs(inputs["values"][0] - batch.values[0]).max() > 100 * TOLERANCE


@pytest.mark.parametrize("length", [None, 8, 12])
def test_pieces_replay_what_the_actors_computed(rollout, length):
    """Pieces cut anywhere (12 does not divide the rollout of 32) start from their stored states:
    the valid steps' log-probabilities and values are the actors'."""
    policy_spec, batch = rollout
    model = make(A2C, policy_spec).model
    data = piece_tensors({"obs": batch.obs, "actions": batch.actions, "logp": batch.logp, "values": batch.values},
                         states=batch.states, valid=batch.valid, length=length, device="cpu")
    with torch.no_grad():
        logp, _, values = evaluate_steps(model, data)
    np.testing.assert_allclose(logp.numpy(), data["logp"][data["valid"]].numpy(), atol=TOLERANCE)
    np.testing.assert_allclose(values.numpy(), data["values"][data["valid"]].numpy(), atol=TOLERANCE)
    assert len(logp) == batch.valid.sum()


def test_impala_update_is_the_loss_of_the_actors_outputs(rollout):
    """The gradient step's loss, computed from the learner's unroll with gradients, equals the
    loss of the actors' log-probabilities and values against the V-trace targets (on-policy, the
    targets of the acting values), and the step moves the weights: the paper's update, one step
    on the whole batch (`minibatch_size` null), with its lambda of 1."""
    policy_spec, batch = rollout
    impala = make(IMPALA, policy_spec, normalize_rewards=False, minibatch_size=None, vtrace_lambda=1.0,
                  normalize_advantages=False)
    before = flat_weights(impala)
    stats = impala.update(batch)
    vs, pg_advantages = compute_vtrace(behaviour_logp=batch.logp, target_logp=batch.logp, rewards=batch.rewards,
                                       values=batch.values, bootstrap_value=batch.bootstrap_value,
                                       terminated=batch.terminated, truncated=batch.truncated, valid=batch.valid,
                                       gamma=GAMMA)
    keep = batch.valid
    assert stats["loss_policy"] == pytest.approx(-np.mean(batch.logp[keep] * pg_advantages[keep]), rel=1e-4, abs=1e-6)
    assert stats["loss_value"] == pytest.approx(0.5 * np.mean((batch.values[keep] - vs[keep]) ** 2), rel=1e-4)
    assert stats["gradient_steps"] == 1
    assert not np.allclose(flat_weights(impala), before)


def test_impala_minibatch_pass_steps_once_per_piece_group(rollout):
    """The default update: one pass of shuffled minibatches of whole pieces (32-step rollouts of
    4 environments, 64 steps a minibatch: two pieces each, two steps), the weights moved."""
    policy_spec, batch = rollout
    impala = make(IMPALA, policy_spec, normalize_rewards=False, minibatch_size=64)
    before = flat_weights(impala)
    stats = impala.update(batch)
    assert stats["gradient_steps"] == 2 and np.isfinite(stats["loss_policy"])
    assert not np.allclose(flat_weights(impala), before)


@pytest.mark.parametrize("sequence_length", [None, 8])
def test_a2c_update_is_the_loss_of_the_actors_outputs(rollout, sequence_length):
    policy_spec, batch = rollout
    a2c = make(A2C, policy_spec, advantage="gae", gae_lambda=0.9, sequence_length=sequence_length,
               normalize_rewards=False)
    before = flat_weights(a2c)
    stats = a2c.update(batch)
    advantages, returns = compute_gae(rewards=batch.rewards, values=batch.values, bootstrap_value=batch.bootstrap_value,
                                      terminated=batch.terminated, truncated=batch.truncated, valid=batch.valid,
                                      gamma=GAMMA, gae_lambda=0.9)
    keep = batch.valid
    assert stats["loss_policy"] == pytest.approx(-np.mean(batch.logp[keep] * advantages[keep]), rel=1e-4, abs=1e-6)
    assert stats["loss_value"] == pytest.approx(0.5 * np.mean((batch.values[keep] - returns[keep]) ** 2), rel=1e-4)
    assert not np.allclose(flat_weights(a2c), before)


@pytest.mark.parametrize("sequence_length", [None, 8])
def test_appo_first_minibatch_is_on_policy(rollout, sequence_length):
    """APPO's first minibatch replays the actors' log-probabilities (ratio 1: no clipping, KL 0
    to the target network, which starts as the policy), then its steps move the weights."""
    policy_spec, batch = rollout
    appo = make(APPO, policy_spec, minibatch_size=32, sequence_length=sequence_length, reuse_per_batch=1,
                normalize_rewards=False)
    first = []
    original = appo.minibatch_loss

    def recording(**part):
        loss, parts = original(**part)
        first.append(parts)
        return loss, parts

    appo.gradient_step.loss_fn = recording
    before = flat_weights(appo)
    stats = appo.update(batch)
    assert stats["gradient_steps"] == 4  # minibatches of whole pieces, 32 steps each
    assert first[0][3].item() == pytest.approx(0.0, abs=TOLERANCE)  # KL(target || policy) before any step
    assert first[0][4].item() == 0.0  # no ratio clipped
    assert not np.allclose(flat_weights(appo), before)


@pytest.mark.parametrize("algo", ["impala", "appo", "a2c"])
def test_recurrent_configs_validate(make_cfg, algo):
    """Each takes a recurrent model; APPO and A2C take `sequence_length` and check it."""
    from rlpar.config.validate import ConfigError, validate_config

    validate_config(make_cfg(f"algo={algo}", "model.recurrent=gru"))
    if algo == "impala":  # learns over whole rollouts: no such key
        return
    validate_config(make_cfg(f"algo={algo}", "model.recurrent=lstm", "algo.sequence_length=4"))
    with pytest.raises(ConfigError, match="algo.sequence_length"):
        validate_config(make_cfg(f"algo={algo}", "model.recurrent=lstm", "algo.sequence_length=0"))


@pytest.mark.slow
def test_recurrent_impala_learns_memory_cue(make_cfg, tmp_path):
    """rlpar/MemoryCue-v0 (answer a cue seen 8 blank steps earlier): a feed-forward policy
    scores 0 on average, a remembering one 1. A local recurrent IMPALA gets above 0.9."""
    run_dir = tmp_path / "memory"
    run(make_cfg("algo=impala", "env.id=rlpar/MemoryCue-v0", "model.recurrent=lstm", "algo.lr=3e-3", "total_steps=60000",
                 "seed=0", "checkpoint.every=0", run_dir=run_dir))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    best = max(r["episode_return_mean"] or -1.0 for r in rows)
    assert best >= 0.9, f"best mean return {best}"
