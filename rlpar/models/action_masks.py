"""Invalid-action masks that arrive in a Dict observation (`model.action_mask_key`, default
`action_mask`, as PettingZoo's classic games and many Gymnasium environments give them), in numpy
and importable without torch.

A mask travels inside the observation rows: the flattened row keeps its 0/1 columns where the Dict
puts them (`ObservationInfo.keys`), so every sampler, batch, replay buffer, checkpoint and V-trace
re-evaluation carries it as it carries observations. The network does not read those columns
(unless `model.mask_as_input`), observation whitening leaves them as they are, and the network's
outputs for masked actions (policy logits, Q-values) become MASKED_LOGIT: probability 0 in
sampling, log-probabilities and entropy, never an argmax. A row (or a MultiDiscrete factor) whose
actions are all masked is left unmasked rather than given no action at all.
"""

from __future__ import annotations

import numpy as np

from rlpar.envs.spaces import ActionInfo

# Finite in float32 and bfloat16 (so 0 * log p stays 0 in entropies, never NaN), and far below
# any logit or Q-value a network learns: exp(MASKED_LOGIT - max) is exactly 0.
MASKED_LOGIT = -1e30
MASKED_BELOW = -1e29  # an output at or below this belongs to a masked action


def mask_columns(observation_keys, key: str | None) -> tuple[int, int] | None:
    """The (start, stop) columns of the Dict key `key` in a flat row, or None (no such key, or
    masking off: `key` None)."""
    if key is None:
        return None
    return next(((start, stop) for name, start, stop in observation_keys if name == key), None)


def mask_problem(key: str, columns: tuple[int, int], action: ActionInfo) -> str | None:
    """Why an observation's mask cannot mask these actions: only integer actions take one
    (Discrete, and MultiDiscrete or MultiBinary per factor), with a column per choice, the
    factors' choices in turn."""
    width = columns[1] - columns[0]
    if not action.discrete:
        return (
            f"the observation's '{key}' masks actions, but the action space is Box: masks are for Discrete "
            f"and MultiDiscrete actions (model.action_mask_key=null reads it as an observation)"
        )
    if width != action.size:
        return (
            f"the observation's '{key}' has {width} columns, but the action space has {action.size} choices "
            f"(a mask needs one 0/1 value per choice; model.action_mask_key=null reads it as an observation)"
        )
    return None


def factor_membership(action: ActionInfo) -> np.ndarray:
    """[size, factors] 0/1 float32: which factor each action column belongs to (one factor for a
    Discrete action)."""
    nvec = action.nvec or (action.size,)
    return np.repeat(np.eye(len(nvec), dtype=np.float32), nvec, axis=0)


def input_keep(obs_dim: int, observation_keys, key: str | None, mask_as_input: bool) -> np.ndarray | None:
    """[obs_dim] float32: 1 for the columns the network reads, 0 for the mask's (and for the copies
    of agents' masks a multi-agent global state holds, keys ending in `/<key>`); None when it
    reads them all."""
    if key is None or mask_as_input:
        return None
    ranges = [(start, stop) for name, start, stop in observation_keys if name == key or name.endswith(f"/{key}")]
    if not ranges:
        return None
    keep = np.ones(obs_dim, np.float32)
    for start, stop in ranges:
        keep[start:stop] = 0.0
    return keep


def legal_actions(mask: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Bool [..., size] from mask columns [..., size] (nonzero: legal); a factor with no legal
    choice has all its choices legal."""
    allowed = mask > 0.5
    counts = allowed.astype(np.float32) @ membership
    return allowed | ((counts == 0).astype(np.float32) @ membership.T > 0)


def masked_outputs(out: np.ndarray, obs: np.ndarray, columns: tuple[int, int], membership: np.ndarray) -> np.ndarray:
    """`out` [N, size] with the masked actions' entries MASKED_LOGIT (a new array)."""
    legal = legal_actions(obs[:, columns[0] : columns[1]], membership)
    return np.where(legal, out, np.asarray(MASKED_LOGIT, out.dtype))


def illegal_choices(out: np.ndarray, actions: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
    """Bool [N]: where `actions` (from outputs `out` [N, size]; factored: [N, F], each factor's
    columns starting at `offsets`) picked a masked action, as a draw may when rounding puts its
    uniform past a CDF that sums to slightly under 1."""
    rows = np.arange(len(out))
    if offsets is None:
        return out[rows, actions] <= MASKED_BELOW
    return (out[rows[:, None], actions + offsets] <= MASKED_BELOW).any(axis=1)


def random_legal(q: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """A uniformly random legal action per row of masked Q-values [N, A], from a uniform in [0, 1)
    per row."""
    legal = q > MASKED_BELOW
    legal |= ~legal.any(axis=1, keepdims=True)
    counts = legal.sum(axis=1)
    nth = np.minimum((uniform * counts).astype(np.int64), counts - 1)
    return (np.cumsum(legal, axis=1) > nth[:, None]).argmax(axis=1)
