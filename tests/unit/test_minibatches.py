"""One minibatch iterator for PPO, MAPPO and APPO: shuffled rows (unrolled), or whole pieces."""

import torch

from rlpar.learning.estimators.sequences import minibatches


def test_rows_in_the_shuffled_order_unroll_at_a_time_and_the_remainder_left_out():
    data = {"obs": torch.arange(10.0)[:, None].repeat(1, 2), "actions": torch.arange(10)}
    order = torch.tensor([3, 1, 4, 0, 9, 2, 6, 5, 8, 7])
    parts = list(minibatches(data, order, size=3, unroll=2))
    assert [p["actions"].shape for p in parts] == [(2, 3), (1, 3)]  # 3 minibatches of 3; row 7 left out
    assert torch.equal(torch.cat([p["actions"].reshape(-1) for p in parts]), order[:9])
    assert torch.equal(parts[0]["obs"][1], data["obs"][[0, 9, 2]])
    assert [p["actions"].shape for p in minibatches(data, order, size=4, count=1)] == [(1, 4)]  # a group's plan
    assert [p["actions"].shape for p in minibatches(data, order, size=64)] == [(1, 10)]  # at most the whole batch


def test_pieces_whole_about_size_steps_each_one_at_a_time():
    length, pieces = 4, 5
    data = {"obs": torch.arange(length * pieces).reshape(length, pieces), "valid": torch.ones(length, pieces, dtype=torch.bool),
            "initial_state": torch.arange(pieces)[:, None]}
    order = torch.tensor([4, 2, 0, 1, 3])
    parts = list(minibatches(data, order, size=8))  # 2 pieces of 4 steps a minibatch; the fifth left out
    assert [p["obs"].shape for p in parts] == [(1, length, 2)] * 2
    assert torch.equal(parts[0]["initial_state"][0, :, 0], torch.tensor([4, 2]))
    assert torch.equal(parts[1]["obs"][0], data["obs"][:, [0, 1]])
