"""Data-parallel learning (learners=N): ranks in real processes joined with torch.distributed
(gloo on 127.0.0.1), each learning from its shard of real CartPole data: environment columns of a
batch (PPO, A2C, IMPALA, APPO), rows of minibatches from a real replay (DQN)."""

import multiprocessing
import os
import socket

import numpy as np
import pytest
import torch

from rlpar.algos.a2c import A2C
from rlpar.algos.appo import APPO
from rlpar.algos.dqn import DQN
from rlpar.algos.impala import IMPALA
from rlpar.algos.ppo import PPO
from rlpar.learners.collective import join_group, leave_group
from rlpar.learners.peers import RankPeers, join
from rlpar.learners.shard import shard_inputs
from rlpar.models.q_spec import QNetworkSpec
from rlpar.replay.settings import ReplaySettings
from tests.rollouts import LEARNER_ONLY, cartpole_rollout, made

pytestmark = pytest.mark.slow  # starts processes

WHOLE_BATCH = 10_000  # minibatch_size above the batch: each pass is one gradient step on all of it
TIMEOUT_S = 60
ALGORITHMS = {"ppo": PPO, "a2c": A2C, "impala": IMPALA, "appo": APPO, "appo_overlap": APPO, "dqn": DQN}
REPLAY = ReplaySettings(capacity=1000, prioritized=True)  # importance weights that differ by row


def make(algo: str, policy_spec, **options):
    """Every algorithm of a test starts from the same weights (seed 0), those the data was acted with."""
    extra = {"replay": REPLAY} if algo == "dqn" else {}
    return made(ALGORITHMS[algo], sampler=LEARNER_ONLY, policy_spec=policy_spec, seed=0, total_steps=100_000, compile=False,
                            **extra, **options)


@pytest.fixture(scope="module")
def rollout():
    """Seed 2: environment columns 0-1 hold 63 valid steps, 2-3 hold 62, so that the halves'
    gradients must be weighted by their sample counts."""
    policy_spec, batch = cartpole_rollout(lambda spec: make("ppo", spec), seed=2)
    assert batch.valid[:, :2].sum() != batch.valid[:, 2:].sum()
    return policy_spec, batch


@pytest.fixture(scope="module")
def q_rollout():
    return cartpole_rollout(lambda spec: make("dqn", spec), spec_class=QNetworkSpec)


def on_policy_updates(algo, rollout, options, count):
    """`count` updates' whole-batch inputs, as rank 0 makes them from a real batch."""
    policy_spec, batch = rollout
    inputs = make(algo, policy_spec, **options).learning_inputs(batch)
    return policy_spec, [inputs] * count


def replay_updates(q_rollout, options, count):
    """`count` updates of 2 minibatches each, drawn by rank 0 from a prioritised replay of real
    CartPole transitions."""
    policy_spec, batch = q_rollout
    dqn = make("dqn", policy_spec, **options)
    assert not hasattr(dqn, "storage")  # built without a sampler, as a group's other ranks are: no replay
    dqn.build_replay()
    assert dqn.insert(batch) > options["batch_size"]
    lr = dqn.optimizer.param_groups[0]["lr"]
    return policy_spec, [dqn.learning_inputs(lr=lr, most=2)[1] for _ in range(count)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights(algorithm) -> dict:
    """The online and (where there is one) target network, as numpy."""
    models = {"model": algorithm.model, "target": getattr(algorithm, "target_model", None)}
    return {f"{prefix}.{k}": v.detach().numpy().copy()
            for prefix, model in models.items() if model is not None for k, v in model.state_dict().items()}


def statistics(out: dict) -> dict:
    """What an update logs, as float64 arrays (DQN: each step's loss, mean |TD error| and mean Q)."""
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items() if k != "td_errors"}


def learner_rank(rank, world_size, port, algo, policy_spec, options, shards, results):
    """One learner process: join the group, learn from its shard of each update, report its
    weights, the TD errors its last update returned (DQN: every rank's rows) and what that
    update logs. Every rank leaves the group together (a barrier first), and the process ends
    with os._exit once its report is flushed: rank 0, which hosts the group's store, aborted now
    and then in the interpreter's own teardown (exit -6, "terminate called without an active
    exception", CI under load), after everything here had finished."""
    torch.set_num_threads(1)
    collective = join_group(rank=rank, world_size=world_size, address="127.0.0.1", port=port, timeout_s=TIMEOUT_S)
    try:
        algorithm = make(algo, policy_spec, **options)
        join(algorithm, collective, RankPeers())
        for shard in shards:
            out = algorithm.learn(shard)
        # numpy, not tensors: torch would share their memory through this process, which is ending
        results.put((rank, weights(algorithm), out.get("td_errors"), statistics(out)))
        torch.distributed.barrier()
    finally:
        leave_group()
    results.close()
    results.join_thread()  # the report has reached the pipe
    os._exit(0)


def learn_in_group(algo, policy_spec, updates: list[dict], world_size: int, options: dict) -> list[tuple]:
    """Each rank's (weights, last TD errors, last statistics) after `updates`, each cut as rank 0
    cuts it (`shard_inputs`, as the algorithm's `input_layout` declares)."""
    shards = [shard_inputs(make(algo, policy_spec, **options), inputs, world_size) for inputs in updates]
    context = multiprocessing.get_context("spawn")
    results, port = context.Queue(), free_port()
    processes = [context.Process(target=learner_rank, daemon=True,
                                 args=(rank, world_size, port, algo, policy_spec, options,
                                       [update[rank] for update in shards], results))
                 for rank in range(world_size)]
    for p in processes:
        p.start()
    try:
        reports = {rank: rest for rank, *rest in (results.get(timeout=4 * TIMEOUT_S) for _ in processes)}
    finally:
        for p in processes:
            p.join(timeout=TIMEOUT_S)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in processes] == [0] * world_size
    return [reports[rank] for rank in range(world_size)]


def learn_alone(algo, policy_spec, updates: list[dict], options: dict) -> tuple[dict, dict, np.ndarray | None, dict]:
    """(weights before, weights after, last TD errors, last statistics) of one learner on the whole inputs."""
    alone = make(algo, policy_spec, **options)
    start = weights(alone)
    for inputs in updates:
        out = alone.learn(inputs)
    return start, weights(alone), out.get("td_errors"), statistics(out)


def assert_logged_as_alone(group: list[tuple], alone: dict) -> None:
    """Every rank logs what one learner logs for the same update: the batch's losses, entropy,
    KL and clip fraction (each minibatch's over every rank's rows of it), within 1e-4 relative."""
    for rank, (_, _, logged) in enumerate(group):
        assert logged.keys() == alone.keys()
        for name, value in alone.items():
            np.testing.assert_allclose(logged[name], value, rtol=1e-4, atol=1e-7, err_msg=f"rank {rank}: {name}")


CASES = {  # options, updates: every case's gradient steps are on whole batches (or whole minibatches)
    "ppo": ({"epochs": 4, "minibatch_size": WHOLE_BATCH}, 1),  # 4 epochs, advantages normalised
    "a2c": ({"normalize_advantages": True}, 2),
    "impala": ({"minibatch_size": WHOLE_BATCH, "normalize_advantages": False}, 2),  # a pass of one minibatch
    "appo": ({"minibatch_size": WHOLE_BATCH, "target_update_every": 3}, 3),  # the buffer's reuse, a target refresh
    # each update in two calls, as APPO.update makes them: the first epoch, then (weights out) two more
    "appo_overlap": ({"minibatch_size": WHOLE_BATCH, "target_update_every": 2, "epochs": 3, "reuse_per_batch": 1,
                      "publish_after_epochs": 1}, 2),
    "dqn": ({"batch_size": 33, "target_update_every": 3}, 2),  # 4 steps, a target refresh, rows 17 + 16
}


@pytest.mark.parametrize("algo", sorted(CASES))
def test_two_learners_on_half_batches_equal_one_on_the_whole_batch(algo, rollout, q_rollout):
    """Updates with learners=2, each rank on half of every batch (or minibatch), give one
    learner's weights on the whole, within 1e-5, and every rank the same weights bit for bit;
    DQN's TD errors come back to rank 0 for every row; every rank logs one learner's statistics."""
    options, count = CASES[algo]
    if algo == "dqn":
        policy_spec, updates = replay_updates(q_rollout, options, count)
    else:
        policy_spec, updates = on_policy_updates(algo, rollout, options, count)
    if options.get("publish_after_epochs"):
        updates = [part for inputs in updates for part in (inputs, {**inputs, "later_epochs": True})]
    start, expected, expected_td, expected_logged = learn_alone(algo, policy_spec, updates, options)
    group = learn_in_group(algo, policy_spec, updates, 2, options)
    assert_logged_as_alone(group, expected_logged)
    for name, value in expected.items():
        assert not np.array_equal(value, start[name]) or "obs_normalizer" in name, name
        np.testing.assert_allclose(group[0][0][name], value, rtol=0, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(group[1][0][name], group[0][0][name], err_msg=name)
    if algo == "dqn":
        assert expected_td.shape == (2, options["batch_size"])
        np.testing.assert_allclose(group[0][1], expected_td, rtol=0, atol=1e-5)


def test_ranks_keep_identical_weights_through_minibatch_updates(rollout):
    """Shuffled minibatches, several epochs, two updates: every rank ends with the same weights,
    bit for bit (they all apply the same all-reduced gradient), and with one learner's weights:
    each rank learns its rows of one learner's minibatches (PPO.input_layout), and logs one
    learner's losses: each minibatch's over every rank's rows of it, not its own rows'."""
    options = {"epochs": 3, "minibatch_size": 32}
    policy_spec, updates = on_policy_updates("ppo", rollout, options, 2)
    group = learn_in_group("ppo", policy_spec, updates, 2, options)
    (rank0, _, _), (rank1, _, _) = group
    start, alone, _, alone_logged = learn_alone("ppo", policy_spec, updates, options)
    assert_logged_as_alone(group, alone_logged)
    assert not np.array_equal(rank0["model.weights.0"], start["model.weights.0"])
    for name in rank0:
        assert np.array_equal(rank0[name], rank1[name]), name
        np.testing.assert_allclose(rank0[name], alone[name], rtol=0, atol=1e-5, err_msg=name)
