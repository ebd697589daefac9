"""Cutting an update's [T, E] inputs between learners by environment column: every rank gets
whole columns, so no sequence (an episode, a recurrent rollout) is ever split."""

from __future__ import annotations

import numpy as np

from rlpar.learners.peers import learner_of


def column_shards(num_envs: int, world_size: int) -> list[np.ndarray]:
    """Each rank's environment columns: contiguous, sizes differing by at most one."""
    if num_envs < world_size:
        raise ValueError(
            f"{num_envs} environments cannot be shared by {world_size} learners (one column each at least)"
        )
    return np.array_split(np.arange(num_envs), world_size)


def take_columns(arrays: dict, columns: np.ndarray) -> dict:
    """The time-major arrays' `columns` (axis 1, copied: a shard travels to another process);
    anything else (scalars, flags) as it is."""
    return {
        name: np.ascontiguousarray(a[:, columns]) if isinstance(a, np.ndarray) and a.ndim >= 2 else a
        for name, a in arrays.items()
    }


def minibatch_shares(
    valid: np.ndarray, columns: list[np.ndarray], orders: list[np.ndarray], minibatch_size: int
) -> list[dict]:
    """Each rank's part of the minibatches one learner would take from the whole batch: per
    epoch, the rank's valid steps (indices among its own, in valid_step_tensors' time-major
    order) in the order `orders` (permutations of all valid steps) visits them, and where each
    minibatch ends. The union of the ranks' j-th minibatches is one learner's j-th minibatch, so
    a group's sample-weighted gradient is that learner's gradient."""
    _, step_columns = np.nonzero(valid)
    rank_of_column = np.empty(valid.shape[1], dtype=np.int64)
    for rank, cols in enumerate(columns):
        rank_of_column[cols] = rank
    step_ranks = rank_of_column[step_columns]
    local = np.empty(len(step_ranks), dtype=np.int64)  # each step's index among its rank's steps
    for rank in range(len(columns)):
        mine = step_ranks == rank
        local[mine] = np.arange(int(mine.sum()))
    mb = min(minibatch_size, len(step_ranks))
    count = len(step_ranks) // mb if mb else 0
    shares: list[dict[str, list]] = [{"orders": [], "ends": []} for _ in columns]
    for order in orders:
        used = np.asarray(order[: count * mb])
        for rank, share in enumerate(shares):
            mine = step_ranks[used] == rank
            share["orders"].append(local[used[mine]])
            share["ends"].append(np.cumsum(mine.reshape(count, mb).sum(axis=1)))
    return shares


def row_ranges(rows: int, world_size: int) -> list[tuple[int, int]]:
    """Each rank's rows of a minibatch of `rows` (replay transitions, not sequences):
    contiguous [start, stop), sizes differing by at most one."""
    if rows < world_size:
        raise ValueError(
            f"a minibatch of {rows} rows cannot be shared by {world_size} learners (one row each at least)"
        )
    return [(int(part[0]), int(part[-1]) + 1) for part in np.array_split(np.arange(rows), world_size)]


def shard_inputs(owner, inputs: dict, world_size: int) -> list[dict]:
    """Each rank's part of an update's inputs, cut as the learner's `input_layout` declares (the
    learner of `owner`, an algorithm or a Learner: rlpar.learners.peers.learner_of):
    `columns`: whole environment columns of time-major [T, E] arrays; `columns+minibatches`:
    those, and each rank's part of every minibatch one learner would take from the epochs'
    shuffles (`orders`) in minibatches of `minibatch_size` (`minibatch_shares`:
    the group learns what one learner learns); `rows`: contiguous rows of every replay minibatch,
    so that rank 0 can put every rank's TD errors back in place."""
    learner = learner_of(owner)
    layout = learner.input_layout
    if layout == "rows":
        return [
            {
                **inputs,
                "rows": (start, stop),
                "minibatches": [{k: v[start:stop] for k, v in m.items()} for m in inputs["minibatches"]],
                "weights": [w[start:stop] for w in inputs["weights"]],
            }
            for start, stop in row_ranges(learner.batch_size, world_size)
        ]
    columns = column_shards(inputs["valid"].shape[1], world_size)
    if layout == "columns+minibatches":
        arrays = {k: v for k, v in inputs.items() if k != "orders"}
        shares = minibatch_shares(inputs["valid"], columns, inputs["orders"], inputs["minibatch_size"])
        return [{**take_columns(arrays, cols), "minibatches": share} for cols, share in zip(columns, shares)]
    if layout == "columns":
        return [take_columns(inputs, cols) for cols in columns]
    raise ValueError(f"{type(learner).__name__}.input_layout {layout!r}: not columns, columns+minibatches or rows")
