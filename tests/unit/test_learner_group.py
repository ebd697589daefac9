"""Data-parallel PPO (learners=N): ranks in real processes joined with torch.distributed (gloo on
127.0.0.1), each learning from its environment columns of a real CartPole batch."""

import multiprocessing
import socket

import numpy as np
import pytest
import torch

from rlpar.algos.ppo import PPO
from rlpar.learners.collective import join_group, leave_group
from tests.rollouts import cartpole_rollout

pytestmark = pytest.mark.slow  # starts processes

WHOLE_BATCH = 10_000  # minibatch_size above the batch: each epoch is one gradient step on all of it
TIMEOUT_S = 60


def make_ppo(policy_spec, **options):
    return PPO(sampler=None, policy_spec=policy_spec, seed=0, total_steps=100_000, compile=False, **options)


@pytest.fixture(scope="module")
def rollout():
    return cartpole_rollout(make_ppo)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def learner_rank(rank, world_size, port, policy_spec, shards, options, results):
    """One learner process: join the group, learn from its shard of each update, report its weights."""
    torch.set_num_threads(1)
    collective = join_group(rank=rank, world_size=world_size, address="127.0.0.1", port=port, timeout_s=TIMEOUT_S)
    try:
        ppo = make_ppo(policy_spec, **options)
        ppo.join_learner_group(collective)
        for shard in shards:
            ppo.learn(shard)
        # numpy, not tensors: torch would share their memory through this process, which is ending
        results.put((rank, {k: v.detach().numpy().copy() for k, v in ppo.model.state_dict().items()}))
    finally:
        leave_group()


def learn_in_group(policy_spec, updates: list[dict], world_size: int, options: dict) -> list[dict]:
    """Each rank's weights after `updates` (whole-batch inputs, cut by environment column)."""
    context = multiprocessing.get_context("spawn")
    results, port = context.Queue(), free_port()
    shards = [make_ppo(policy_spec, **options).shard_inputs(inputs, world_size) for inputs in updates]
    processes = [context.Process(target=learner_rank, daemon=True,
                                 args=(rank, world_size, port, policy_spec,
                                       [update[rank] for update in shards], options, results))
                 for rank in range(world_size)]
    for p in processes:
        p.start()
    try:
        weights = dict(results.get(timeout=4 * TIMEOUT_S) for _ in processes)
    finally:
        for p in processes:
            p.join(timeout=TIMEOUT_S)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in processes] == [0] * world_size
    return [{k: torch.from_numpy(v) for k, v in weights[rank].items()} for rank in range(world_size)]


def whole_batch_inputs(policy_spec, batch, **options) -> dict:
    return make_ppo(policy_spec, **options).learning_inputs(batch)


def test_two_learners_on_half_batches_equal_one_on_the_whole_batch(rollout):
    """One PPO update (4 epochs, each one step on the whole batch, advantages normalised) with
    learners=2 on 2 environment columns each gives one learner's weights on all 4."""
    policy_spec, batch = rollout
    options = {"epochs": 4, "minibatch_size": WHOLE_BATCH}
    inputs = whole_batch_inputs(policy_spec, batch, **options)
    alone = make_ppo(policy_spec, **options)
    start = {k: v.clone() for k, v in alone.model.state_dict().items()}
    alone.learn(inputs)
    group = learn_in_group(policy_spec, [inputs], 2, options)
    for name, expected in alone.model.state_dict().items():
        assert not torch.equal(expected, start[name]) or name.startswith("obs_normalizer")
        for rank_weights in group:
            np.testing.assert_allclose(rank_weights[name].numpy(), expected.numpy(), rtol=0, atol=1e-5, err_msg=name)


def test_ranks_keep_identical_weights_through_minibatch_updates(rollout):
    """Shuffled minibatches, several epochs, two updates: every rank ends with the same weights,
    bit for bit (they all apply the same all-reduced gradient), and with one learner's weights."""
    policy_spec, batch = rollout
    options = {"epochs": 3, "minibatch_size": 32}
    inputs = whole_batch_inputs(policy_spec, batch, **options)
    rank0, rank1 = learn_in_group(policy_spec, [inputs, inputs], 2, options)
    alone = make_ppo(policy_spec, **options)
    start = {k: v.clone() for k, v in alone.model.state_dict().items()}
    for _ in range(2):
        alone.learn(inputs)
    assert not torch.equal(rank0["weights.0"], start["weights.0"])
    for name, expected in alone.model.state_dict().items():
        assert torch.equal(rank0[name], rank1[name]), name
        # each rank's rows of one learner's minibatches: the group learns what one learner learns
        np.testing.assert_allclose(rank0[name].numpy(), expected.numpy(), rtol=0, atol=1e-5, err_msg=name)
