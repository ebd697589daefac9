"""The acting copies of the recurrent networks (modules/recurrent.py), in numpy float64: the encoder (MLP
trunk, or numpy_cnn's encoder), the LSTM or GRU core, then the heads, from the learner's state
dict. Workers keep each environment's state and hand it in; `outputs` advances it in place.

float64, as the other numpy copies: a row's result does not depend on how many rows are computed
together, so batches are identical however environments are split over workers.
"""

from __future__ import annotations

import numpy as np

from rlpar.models.acting.numpy_acting import ACTIVATIONS, EpsilonGreedyChoice, PolicyChoice
from rlpar.models.acting.numpy_policy import WhitenedObservations
from rlpar.models.acting.numpy_q_policy import q_from_features, q_heads


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # no overflow warnings for large |x|


def _as64(weights: dict, name: str) -> np.ndarray:
    return np.asarray(weights[name], np.float64)


class NumpyRecurrentEncoding:
    """Encoder and core of a recurrent network's state dict (`encoder.*`, `core.cell.*`)."""

    _input_keep: np.ndarray | None  # the columns the network reads (NumpyActing's, mixed in); None: all

    def _init_recurrent(self, spec) -> None:
        self.spec = spec
        self.kind, self.size = spec.recurrent, spec.recurrent_size
        self.state_size = spec.state_size
        self.pixels = spec.obs_dtype == "uint8"
        self.activation = ACTIVATIONS[spec.activation]
        self.image_encoder = None
        if spec.chosen_encoder != "mlp":
            from rlpar.models.acting.numpy_cnn import NumpyEncoder

            self.image_encoder = NumpyEncoder(spec.chosen_encoder, spec.image_shape, spec.channels_last)

    def _set_recurrent_weights(self, weights: dict) -> None:
        if self.image_encoder is not None:
            self.image_encoder.set_weights(weights)
        else:
            linear = sorted(
                {int(k.split(".")[1]) for k in weights if k.startswith("encoder.") and k.endswith(".weight")}
            )
            self.trunk = [
                (_as64(weights, f"encoder.{i}.weight").T.copy(), _as64(weights, f"encoder.{i}.bias")) for i in linear
            ]
        self.w_ih = _as64(weights, "core.cell.weight_ih").T.copy()
        self.b_ih = _as64(weights, "core.cell.bias_ih")
        self.w_hh = _as64(weights, "core.cell.weight_hh").T.copy()
        self.b_hh = _as64(weights, "core.cell.bias_hh")

    def core_step(self, obs: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The core's output h [N, H] for normalised observations; `state` [N, S] advances in place."""
        if self.image_encoder is not None:
            x = self.image_encoder(obs)
        else:
            x = obs.astype(np.float64)
            if self.pixels:
                x /= 255.0
            if self._input_keep is not None:  # the network does not read the mask
                x *= self._input_keep
            for w, b in self.trunk:
                x = self.activation(x @ w + b)
        projected = x @ self.w_ih + self.b_ih
        size = self.size
        if self.kind == "lstm":
            h, c = np.ascontiguousarray(state[:, :size]), state[:, size:]  # a strided h would miss BLAS
            gates = projected + h @ self.w_hh + self.b_hh
            i, f, g, o = (gates[:, k * size : (k + 1) * size] for k in range(4))
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            state[:, :size], state[:, size:] = h, c
            return h
        recurrent = state @ self.w_hh + self.b_hh
        r = _sigmoid(projected[:, :size] + recurrent[:, :size])
        z = _sigmoid(projected[:, size : 2 * size] + recurrent[:, size : 2 * size])
        n = np.tanh(projected[:, 2 * size :] + r * recurrent[:, 2 * size :])
        h = n + z * (state - n)  # (1 - z) n + z h, as torch.lerp
        state[:] = h
        return h

    def _step(self, obs: np.ndarray, state: np.ndarray | None) -> np.ndarray:
        if state is None:
            raise ValueError("a recurrent policy acts with a state per environment: pass state ([N, state_size])")
        return self.core_step(obs, state)


class NumpyRecurrentPolicy(NumpyRecurrentEncoding, WhitenedObservations, PolicyChoice):
    """recurrent.RecurrentActorCritic's acting copy; actions chosen by PolicyChoice."""

    def __init__(self, spec):
        PolicyChoice.__init__(self, spec.action)
        self._init_recurrent(spec)
        self._init_whitening(spec)
        self._init_action_mask(spec)

    def set_weights(self, weights: dict) -> None:
        self._set_recurrent_weights(weights)
        kernel = np.concatenate([_as64(weights, "actor.weight"), _as64(weights, "critic.weight")])  # [A + 1, H]
        self.heads = np.ascontiguousarray(kernel.T)
        self.heads_bias = np.concatenate([_as64(weights, "actor.bias"), _as64(weights, "critic.bias")])
        self._set_whitening(weights)
        self.set_choice_weights(weights)

    def outputs(self, obs: np.ndarray, state: np.ndarray | None = None):
        """Actor outputs [N, A] and values [N], in float64; `state` advances in place."""
        x = self._step(obs, state) @ self.heads + self.heads_bias
        return self._masked(x[:, :-1], obs), x[:, -1]


class NumpyRecurrentQPolicy(NumpyRecurrentEncoding, EpsilonGreedyChoice):
    """recurrent.RecurrentQNetwork's acting copy: ε-greedy (EpsilonGreedyChoice)."""

    def __init__(self, spec, env_ids=None):
        EpsilonGreedyChoice.__init__(self, env_ids)
        self._init_recurrent(spec)
        self._init_action_mask(spec)

    def set_weights(self, weights: dict) -> None:
        self._set_recurrent_weights(weights)
        self.heads = q_heads(weights)
        self.set_choice_weights(weights)

    def outputs(self, obs: np.ndarray, state: np.ndarray | None = None) -> tuple:
        return (self._masked(q_from_features(self._step(obs, state), self.heads), obs),)
