"""What the acting policies share: activations, acting from raw observations, and the action
choice from a network's outputs.

An acting policy computes its network's `outputs` for normalised observations, then `choose`s
actions from those outputs and per-environment noise. Keeping the two apart lets a central
inference server (rlpar.sampling.inference) run the network in torch on a GPU and still choose
actions with exactly the same maths as the workers. Every actor-critic copy (MLP or CNN, numpy
or torch) chooses with `PolicyChoice`, every Q-network copy with `EpsilonGreedyChoice`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlpar.envs.spaces import ActionInfo, factor_columns
from rlpar.models.action_masks import factor_membership, illegal_choices, masked_outputs, random_legal

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))),
}


def _elu_in_place(x: np.ndarray) -> np.ndarray:
    np.copyto(x, ACTIVATIONS["elu"](x))
    return x


class _ReluInPlace:
    """max(x, 0) into x, against a zeros array of x's shape kept from call to call: numpy
    vectorises the maximum of two whole arrays, not that of an array and a broadcast scalar
    (the same numbers)."""

    KEPT_SHAPES = 16

    def __init__(self):
        self._zeros: dict[tuple, np.ndarray] = {}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        zeros = self._zeros.get(x.shape)
        if zeros is None or zeros.dtype != x.dtype:
            if len(self._zeros) >= self.KEPT_SHAPES:
                self._zeros.clear()
            zeros = self._zeros[x.shape] = np.zeros(x.shape, x.dtype)
            zeros.flags.writeable = False
        return np.maximum(x, zeros, out=x)


# The same activations overwriting their input (a fresh product): no allocation per layer and step.
ACTIVATIONS_IN_PLACE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": lambda x: np.tanh(x, out=x),
    "relu": _ReluInPlace(),
    "elu": _elu_in_place,
}
LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
FEW_CHOICES = 4  # up to this many actions `categorical` draws row by row (_draw_among_few)


class NumpyActing:
    # The copy's arithmetic: float64, which keeps a row's results independent of how many rows are
    # computed together (identical batches however environments are split over workers), or
    # float32 (`model.acting=numpy32`: faster, without that guarantee). Rollouts draw noise in it.
    dtype = np.dtype(np.float64)
    # An action mask's columns in the observation rows (rlpar.models.action_masks); None: no mask
    mask_columns: tuple[int, int] | None = None
    _input_keep: np.ndarray | None = None  # bool [obs_dim]: the columns the network reads; None: all

    def _init_action_mask(self, spec) -> None:
        self.mask_columns = getattr(spec, "mask_columns", None)
        if self.mask_columns is not None:
            self._mask_membership = factor_membership(spec.action)
            keep = spec.input_keep
            self._input_keep = None if keep is None else keep.astype(bool)

    def _masked(self, out: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """`out` (policy logits or Q-values [N, size]) with masked actions' MASKED_LOGIT."""
        if self.mask_columns is None:
            return out
        return masked_outputs(out, np.asarray(obs), self.mask_columns, self._mask_membership)

    def _first_layer_rows(self, w: np.ndarray) -> np.ndarray:
        """A first layer's weights [..., inputs, outputs] with the rows of an action mask's
        columns zeroed when the network does not read them (model.mask_as_input false)."""
        if self._input_keep is None:  # no mask, or the network reads it
            return w
        return np.where(self._input_keep[:, None], w, np.zeros((), w.dtype))

    def set_weights(self, weights: dict) -> None:
        raise NotImplementedError

    def normalize(self, raw_obs: np.ndarray) -> np.ndarray:
        return raw_obs

    state_size = 0  # values per environment in a recurrent state (numpy_recurrent.py); 0: none

    def outputs(self, obs: np.ndarray, state: np.ndarray | None = None) -> tuple:
        """The network's outputs (in `dtype`) for normalised observations. A recurrent copy reads
        and advances `state` ([N, state_size] float64) in place; others ignore it."""
        raise NotImplementedError

    def choose(self, outputs: tuple, noise: np.ndarray | None):
        """Actions, log-probabilities and values from `outputs`; `noise=None` acts greedily."""
        raise NotImplementedError

    def values(self, outputs: tuple) -> np.ndarray:
        """The values `choose` returns for `outputs`, without choosing actions."""
        return self.choose(outputs, None)[2]

    def act(self, obs: np.ndarray, noise: np.ndarray | None, state: np.ndarray | None = None):
        return self.choose(self.outputs(obs, state), noise)

    def act_raw(self, raw_obs: np.ndarray, noise: np.ndarray | None, state: np.ndarray | None = None):
        """Normalised observations, actions, log-probabilities and values for raw observations:
        the one call per step a rollout makes (the same whether the policy is here or central)."""
        obs = self.normalize(raw_obs)
        return (obs, *self.act(obs, noise, state))

    def value_raw(self, raw_obs: np.ndarray, state: np.ndarray | None = None):
        """Normalised observations and their values for raw observations, the values `act_raw`
        gives: a rollout's bootstrap, which needs no action."""
        obs = self.normalize(raw_obs)
        return obs, self.values(self.outputs(obs, state))


def categorical(logits: np.ndarray, noise: np.ndarray | None, last):
    """Inverse-CDF draws along axis 0 of `logits` ([choices, ...], float64), one uniform per
    draw (`noise`: the remaining shape), or the argmax without noise; `last`: the highest index
    (a rounding guard: a uniform above a CDF that sums to slightly under 1). Returns the indices and
    their log-probabilities. Reducing along the outer axis: numpy's reduction set-up dominates at
    a few actions, and this is ~30% faster per step than along the inner one. Every result of a
    draw depends on its own column only, never on the batch size."""
    if noise is not None and 2 <= len(logits) <= FEW_CHOICES and not isinstance(last, np.ndarray):
        return _draw_among_few(logits, noise)
    shifted = logits - logits.max(axis=0)
    logp_all = shifted - np.log(np.exp(shifted).sum(axis=0))
    if noise is None:
        actions = logp_all.argmax(axis=0)
    else:
        cdf = np.cumsum(np.exp(logp_all), axis=0)
        actions = np.minimum((noise > cdf).sum(axis=0), last)
    if actions.ndim == 1:
        return actions, logp_all[actions, np.arange(len(actions))]
    flat = actions.reshape(-1)  # fancy indexing: a few microseconds less than take_along_axis
    return actions, logp_all.reshape(len(logp_all), -1)[flat, np.arange(flat.size)].reshape(actions.shape)


def _draw_among_few(logits: np.ndarray, noise: np.ndarray):
    """`categorical`'s draw for a few choices, row by row: the same numbers (numpy reduces along
    the outer axis row after row, and cumsum adds rows in order; counting the CDF rows below the
    uniform but the last one is the guard), with one cheap call per row in place of the reductions',
    cumsum's and fancy indexing's set-up."""
    top = logits[0]
    for row in logits[1:]:
        top = np.maximum(top, row)
    shifted = logits - top
    exps = np.exp(shifted)
    total = exps[0]
    for row in exps[1:]:
        total = total + row
    logp_all = shifted - np.log(total)
    probs = np.exp(logp_all)
    cdf = probs[0]
    above = noise > cdf
    actions, logp = above.astype(np.int64), np.where(above, logp_all[1], logp_all[0])
    for k in range(1, len(logits) - 1):
        cdf = cdf + probs[k]
        above = noise > cdf
        actions += above
        logp = np.where(above, logp_all[k + 1], logp)
    return actions, logp


class PolicyChoice(NumpyActing):
    """An actor-critic's action choice from its outputs (actor outputs [N, A] and values [N]):
    a categorical (Discrete), a factorised categorical (MultiDiscrete, MultiBinary: one
    categorical per factor, their log-probabilities summed) or a diagonal Gaussian (Box, with the
    log-standard deviations of the weights)."""

    def __init__(self, action: ActionInfo, dtype=np.float64):
        self.action = action
        self.discrete, self.factored = action.discrete, action.factored
        self.dtype = np.dtype(dtype)
        self.log_std = np.zeros(action.size, self.dtype)
        self.std = np.ones(action.size, self.dtype)
        if self.factored:
            self._factor_last = (np.asarray(action.nvec, np.int64) - 1)[:, None]  # [F, 1]
            # None: logits [N, F * n] reshape to [N, F, n]; otherwise gathered into [N, F, max n]
            # with -inf padding (probability 0: draws never land there)
            self._factor_columns = factor_columns(action)

    def set_choice_weights(self, weights: dict) -> None:
        """What the choice reads from the weights: the Gaussian's log-standard deviations."""
        if not self.discrete:
            self.log_std = np.asarray(weights["log_std"], self.dtype)
            self.std = np.exp(self.log_std)

    def values(self, outputs: tuple) -> np.ndarray:
        return outputs[1].astype(np.float32, copy=False)

    def choose(self, outputs: tuple, noise: np.ndarray | None):
        """Randomness comes only from `noise` (a uniform per categorical draw, standard normals
        for a Gaussian), one row per environment."""
        out, values = outputs
        values = values.astype(np.float32, copy=False)
        if self.discrete:
            actions, logp = self._choose_discrete(out, noise)
            if noise is not None and self.mask_columns is not None:
                actions, logp = self._kept_legal(out, actions, logp)
            return actions, logp.astype(np.float32, copy=False), values
        if noise is None:
            return out.astype(np.float32), np.zeros(len(out), np.float32), values
        actions = out + self.std * noise
        logp = (-0.5 * np.square(noise) - self.log_std - LOG_SQRT_2PI).sum(axis=1)
        return actions.astype(np.float32, copy=False), logp.astype(np.float32, copy=False), values

    def _choose_discrete(self, out: np.ndarray, noise: np.ndarray | None):
        if self.factored:
            return self._choose_factored(out, noise)
        return categorical(np.ascontiguousarray(out.T), noise, out.shape[1] - 1)

    def _kept_legal(self, out: np.ndarray, actions: np.ndarray, logp: np.ndarray):
        """Draws that rounding put on a masked action (probability 0) replaced by the greedy
        action, so that a masked action is never taken."""
        offsets = None
        if self.factored:
            offsets = np.concatenate([[0], np.cumsum(self.action.nvec)[:-1]]).astype(np.int64)
        illegal = illegal_choices(out, actions, offsets)
        if illegal.any():
            greedy, greedy_logp = self._choose_discrete(out[illegal], None)
            actions, logp = actions.copy(), logp.copy()
            actions[illegal], logp[illegal] = greedy, greedy_logp
        return actions, logp

    def _choose_factored(self, out: np.ndarray, noise: np.ndarray | None):
        """Actions [N, F] (int64) and summed log-probabilities [N]: each factor as `categorical`,
        with that factor's uniform (noise [N, F])."""
        n = len(out)
        if self._factor_columns is None:
            logits = out.reshape(n, len(self.action.nvec), -1)
        else:
            logits = np.concatenate([out, np.full((n, 1), -np.inf)], axis=1)[:, self._factor_columns]
        logits = np.ascontiguousarray(logits.transpose(2, 1, 0))  # [choices, F, N]
        actions, logp = categorical(logits, None if noise is None else noise.T, self._factor_last)
        return np.ascontiguousarray(actions.T), logp.sum(axis=0)


class EpsilonGreedyChoice(NumpyActing):
    """A Q-network's action choice: ε-greedy, ε arriving with the weights (`epsilon`: one value,
    or one per environment of the run, which is how Ape-X gives each actor its own rate);
    `env_ids` are the environments this copy steps."""

    def __init__(self, env_ids=None):
        self.env_ids = None if env_ids is None else np.asarray(env_ids)
        self.epsilon = np.ones(1)

    def set_choice_weights(self, weights: dict) -> None:
        epsilon = np.atleast_1d(np.asarray(weights.get("epsilon", 0.0), np.float64))
        self.epsilon = epsilon[self.env_ids] if len(epsilon) > 1 and self.env_ids is not None else epsilon

    def values(self, outputs: tuple) -> np.ndarray:
        return outputs[0].max(axis=1).astype(np.float32)

    def choose(self, outputs: tuple, noise: np.ndarray | None):
        """ε-greedy actions from one uniform per environment: below ε it explores, and u/ε,
        itself uniform, picks the action. Log-probabilities are not used by Q-learning (zeros);
        values are max_a Q."""
        (q,) = outputs
        actions = q.argmax(axis=1)
        if noise is not None:
            explore = noise < self.epsilon
            if self.mask_columns is not None:  # masked Q-values (MASKED_LOGIT): random among the legal actions
                random_actions = random_legal(q, np.minimum(noise / np.maximum(self.epsilon, 1e-12), 1.0))
            else:
                random_actions = np.minimum(
                    (noise / np.maximum(self.epsilon, 1e-12) * q.shape[1]).astype(np.int64), q.shape[1] - 1
                )
            actions = np.where(explore, random_actions, actions)
        return actions, np.zeros(len(q), np.float32), q.max(axis=1).astype(np.float32)

    def replay_priorities(self, transitions: dict) -> np.ndarray:
        """|n-step TD error| of replayed transitions under this copy (Ape-X's actors prioritise
        their own experience)."""
        q = self.outputs(transitions["obs"])[0]
        taken = q[np.arange(len(q)), transitions["actions"]]
        bootstrap = self.outputs(transitions["next_obs"])[0].max(axis=1)
        return np.abs(transitions["rewards"] + transitions["discounts"] * bootstrap - taken)
