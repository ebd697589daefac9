"""Sequences for recurrent learners: a batch's environment columns cut into pieces of a fixed
length, each replayed from the recurrent state stored at its first step (`Batch.states`).

A piece never mixes environments and keeps time order, so the core sees what the actor saw;
the reset after an autoreset step happens inside it (rlpar.models.modules.recurrent). A rollout whose
length is not a multiple of the piece length ends in a shorter piece, padded with steps that are
not valid (never trained on). Learners draw minibatches of whole pieces, never a cut through one.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlpar.learning.estimators.batch_tensors import valid_step_tensors


def piece_count(rollout_length: int, num_envs: int, length: int | None) -> int:
    """How many pieces a [T, E] batch makes (`length` None: whole rollouts)."""
    return num_envs * math.ceil(rollout_length / (length or rollout_length))


def cut_pieces(arrays: dict, *, states: np.ndarray, valid: np.ndarray, length: int | None) -> dict:
    """Time-major [T, E, ...] arrays as [L, P, ...] pieces (piece p = k * E + e: the k-th piece of
    environment e), with `valid` [L, P] and `initial_state` [P, S], the stored state entering
    each piece."""
    T, E = valid.shape
    L = length or T
    count = math.ceil(T / L)
    pad = count * L - T

    def pieces(a: np.ndarray) -> np.ndarray:
        if pad:
            a = np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)])
        return a.reshape(count, L, E, *a.shape[2:]).swapaxes(0, 1).reshape(L, count * E, *a.shape[2:])

    out = {name: pieces(a) for name, a in arrays.items()}
    out["valid"] = pieces(valid)
    out["initial_state"] = states[::L].reshape(count * E, -1)
    return out


def piece_tensors(arrays: dict, *, states: np.ndarray, valid: np.ndarray, length: int | None, device) -> dict:
    """`cut_pieces` as tensors on `device`: what a recurrent learner's minibatches are taken from."""
    return {
        name: torch.as_tensor(a, device=device)
        for name, a in cut_pieces(arrays, states=states, valid=valid, length=length).items()
    }


def step_tensors(
    arrays: dict, *, valid: np.ndarray, states: np.ndarray | None, length: int | None, device, recurrent: bool
) -> dict:
    """Time-major [T, E] arrays as what losses take: a feed-forward model's flat valid steps; a
    recurrent model's [L, P] pieces of `length` steps (None: whole rollouts) with their `valid`
    steps and stored `initial_state`."""
    if recurrent:
        assert states is not None  # a recurrent policy's rollout holds its states
        return piece_tensors(arrays, states=states, valid=valid, length=length, device=device)
    return valid_step_tensors(arrays, valid, device)


def pieces_per_minibatch(valid: torch.Tensor, minibatch_size: int) -> int:
    """Whole pieces ([L, P] `valid`) in a minibatch of about `minibatch_size` steps: at least one,
    at most all."""
    length, count = valid.shape
    return min(max(minibatch_size // length, 1), count)


def take_pieces(data: dict, pieces: torch.Tensor) -> dict:
    """The pieces `pieces` (indices) of `piece_tensors`' output: along axis 1, the states along axis 0."""
    return {name: (v[pieces] if name == "initial_state" else v[:, pieces]) for name, v in data.items()}


def minibatches(data: dict, order: torch.Tensor, *, size: int, count: int | None = None, unroll: int = 1):
    """Shuffled minibatches of `data` in `order`, each with a leading dimension of minibatches;
    the remainder is left out. A recurrent policy's pieces (`data` holds `valid`, [L, P]): whole
    pieces, about `size` steps a minibatch, one at a time (`order` shuffles the pieces). Rows:
    `count` minibatches (default: as many as fit) of `size` rows, `unroll` at a time (one compiled
    graph), contiguous views of the shuffled rows."""
    if "valid" in data:
        pieces, per = data["valid"].shape[1], pieces_per_minibatch(data["valid"], size)
        for first in range(0, pieces - per + 1, per):
            yield {k: v[None] for k, v in take_pieces(data, order[first : first + per]).items()}
        return
    size = min(size, len(order))
    count = len(order) // size if count is None else count
    shuffled = {k: v[order] for k, v in data.items()}
    for first in range(0, count, unroll):
        group = min(unroll, count - first)
        yield {k: v[first * size : (first + group) * size].view(group, size, *v.shape[1:]) for k, v in shuffled.items()}


def evaluate_steps(model, data: dict, *, with_entropy: bool = True, with_bounds: bool = False):
    """The model's log-probabilities, entropies and values for `data`'s actions (and, `with_bounds`,
    each step's bounds penalty): flat steps for a feed-forward model; for a recurrent one, the
    valid steps of `data`'s pieces, flat and time-major (as `valid_steps` takes the other arrays)."""
    if not model.recurrent:
        return model.evaluate_actions(data["obs"], data["actions"], with_entropy=with_entropy, with_bounds=with_bounds)
    return model.evaluate_actions(
        data["obs"],
        data["actions"],
        with_entropy=with_entropy,
        with_bounds=with_bounds,
        initial_state=data["initial_state"],
        valid=data["valid"],
    )


def valid_steps(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """A per-step array of pieces ([L, P]) as the flat valid steps `evaluate_steps` returns; flat
    steps (`valid` None) as they are."""
    return x if valid is None else x[valid]


def sequence_stats(valid: torch.Tensor) -> dict:
    """What a recurrent learner logs about its pieces ([L, P] valid steps): how many, how long,
    the share of padding and autoreset steps, and the episode starts inside a piece (states
    zeroed mid-piece), per piece."""
    length, count = valid.shape
    return {
        "sequence_pieces": count,
        "sequence_length": length,
        "sequence_invalid_fraction": float(1.0 - valid.float().mean()),
        "sequence_resets_per_piece": float((~valid[:-1]).sum()) / count,
    }
