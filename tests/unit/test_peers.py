"""What an update asks of its peers, answered by one learner alone (rlpar.learning.peers), the
stand-in a learner that never samples is built with, and how the group cuts inputs by the
layout an algorithm declares (rlpar.learners.shard.shard_inputs)."""

import numpy as np
import pytest
import torch

from rlpar.learners.shard import shard_inputs
from rlpar.learning.losses.ppo_loss import normalize
from rlpar.learning.peers import ALONE, BatchShape


class Counting:
    """An algorithm's `learn`, counting its calls."""

    input_layout = "columns"

    def __init__(self):
        self.calls = []

    def learn(self, inputs):
        self.calls.append(inputs)
        return {"loss": float(inputs["x"]) * 2}


def test_alone_learns_by_calling_the_algorithms_learn_once():
    algorithm = Counting()
    assert ALONE.learn(algorithm, {"x": 3}) == {"loss": 6.0}
    assert algorithm.calls == [{"x": 3}]


def test_alone_normalises_advantages_over_its_own_minibatch():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    expected = (x - 2.5) / (torch.tensor(1.6666666).sqrt() + 1e-8)  # unbiased variance 5/3
    torch.testing.assert_close(ALONE.normalize(x), expected)
    torch.testing.assert_close(ALONE.normalize(x), normalize(x), rtol=0, atol=0)


def test_alone_reductions_are_its_own_values():
    values = torch.tensor([[0.5, 1.5], [2.0, float("nan")]])
    assert ALONE.mean(values, samples=7) is values
    assert ALONE.means_per_row(values, samples=[3, 4]) is values
    assert ALONE.sum(values) is values
    assert ALONE.all_rows(values, rows=(0, 2), total=2) is values


def test_alone_receives_nothing_its_learning_rate_stays():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ALONE.receive(model, optimizer, 0.5)
    assert optimizer.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize(("size", "minibatch", "plan"), [(100, 32, (32, 3)), (10, 64, (10, 1)), (64, 64, (64, 1))])
def test_alone_minibatch_plan_leaves_the_remainder_out(size, minibatch, plan):
    assert ALONE.minibatch_plan(size, minibatch) == plan


def test_alone_draws_one_replay_minibatch_at_a_time_and_keeps_nothing():
    assert ALONE.draws_at_once(5) == 1 and ALONE.draws_at_once(None) == 1
    assert ALONE.metrics() == {} and ALONE.state_dict() == {}
    ALONE.load_state_dict({"learner_rngs": [1]})
    assert ALONE.state_dict() == {}


def test_a_batch_shape_carries_the_shape_and_builds_nothing_for_sampling():
    shape = BatchShape(rollout_length=8, num_envs=6, worker_envs=2)
    assert (shape.rollout_length, shape.num_envs, shape.num_rollout_workers) == (8, 6, 3)
    assert BatchShape(rollout_length=8, num_envs=6).num_rollout_workers == 1
    built = []
    shape.when_sampling(lambda: built.append(1))
    assert built == []


def test_a_replay_learner_built_with_a_batch_shape_keeps_no_replay():
    from rlpar.algos.dqn import DQN, DQNConfig
    from rlpar.envs.spaces import ActionInfo
    from rlpar.models.q_spec import QNetworkSpec

    dqn = DQN(
        DQNConfig(),
        sampler=BatchShape(rollout_length=4, num_envs=2),
        policy_spec=QNetworkSpec(obs_dim=3, action=ActionInfo(True, 2)),
        total_steps=100,
        seed=0,
    )
    assert not hasattr(dqn, "storage") and not hasattr(dqn, "replay")
    assert dqn.peers is ALONE
    assert "learner_rngs" not in dqn.state_dict()


def test_inputs_are_cut_as_the_algorithm_declares():
    valid = np.ones((3, 5), dtype=bool)
    inputs = {"valid": valid, "obs": np.arange(15).reshape(3, 5), "lr": 0.1}
    columns = shard_inputs(Counting(), inputs, 2)
    assert [s["obs"][0].tolist() for s in columns] == [[0, 1, 2], [3, 4]]
    assert [s["lr"] for s in columns] == [0.1, 0.1]

    class Rows:
        input_layout, batch_size = "rows", 5

    minibatch = {"obs": np.arange(5)}
    rows = shard_inputs(Rows(), {"minibatches": [minibatch], "weights": [np.ones(5)], "lr": 0.1}, 2)
    assert [s["rows"] for s in rows] == [(0, 3), (3, 5)]
    assert [s["minibatches"][0]["obs"].tolist() for s in rows] == [[0, 1, 2], [3, 4]]

    class Unknown:
        input_layout = "diagonal"

    with pytest.raises(ValueError, match="input_layout 'diagonal'"):
        shard_inputs(Unknown(), inputs, 2)
