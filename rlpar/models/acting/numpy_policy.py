"""The acting copy of the policy, in numpy.

Workers only run forward passes on a handful of observations at a time; at that size numpy
is several times faster per step than torch here, and workers need not import torch at all
(which makes subprocess and Ray-actor start-up cheap). It reads the torch module's state dict,
so the two must agree on its layout (stacked actor/critic towers, see modules/actor_critic.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the spec builds these classes: importing it here would be a circle
    from rlpar.models.spec import PolicySpec


from rlpar.models.acting.numpy_acting import ACTIVATIONS_IN_PLACE, PolicyChoice
from rlpar.models.constants import VALUE_NORM_EPSILON


def _layers(weights: dict, dtype) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight [2, in, out], bias [2, 1, out]) per layer of ActorCritic's stacked state dict."""
    count = sum(1 for k in weights if k.startswith("weights."))
    return [
        (np.asarray(weights[f"weights.{i}"], dtype), np.asarray(weights[f"biases.{i}"], dtype)) for i in range(count)
    ]


class WhitenedObservations:
    """Observations whitened with the statistics that arrive with the weights (`normalize_obs`),
    clipped as the learner's ObservationNormalizer does."""

    clip_obs, epsilon = 10.0, 1e-8
    spec: Any  # the policy's spec, set by the class this is mixed into

    def _init_whitening(self, spec) -> None:
        self.obs_mean = np.zeros(spec.obs_dim, np.float32)
        self.obs_inv_std = np.ones(spec.obs_dim, np.float32)

    def _set_whitening(self, weights: dict) -> None:
        if self.spec.normalize_obs:
            self.obs_mean = np.asarray(weights["obs_normalizer.mean"], np.float32)
            var = np.asarray(weights["obs_normalizer.var"], np.float64)
            self.obs_inv_std = (1.0 / np.sqrt(var + self.epsilon)).astype(np.float32)
            columns = self.spec.mask_columns  # an action mask stays 0/1 (the learner keeps its statistics 0, 1)
            if columns is not None:
                self.obs_mean[columns[0] : columns[1]], self.obs_inv_std[columns[0] : columns[1]] = 0.0, 1.0

    def normalize(self, raw_obs: np.ndarray) -> np.ndarray:
        if not self.spec.normalize_obs:
            return raw_obs
        return np.minimum(np.maximum((raw_obs - self.obs_mean) * self.obs_inv_std, -self.clip_obs), self.clip_obs)


class NumpyPolicy(WhitenedObservations, PolicyChoice):
    """The MLP actor-critic; actions chosen by PolicyChoice (numpy_acting.py). `dtype`: float64
    (identical batches however environments are split) or float32 (`acting=numpy32`)."""

    def __init__(self, spec: PolicySpec, dtype=np.float64):
        super().__init__(spec.action, dtype)
        self.spec = spec
        self.pixels = spec.obs_dtype == "uint8"  # image bytes fed to the MLP: scaled to [0, 1] as in torch
        self.activate = ACTIVATIONS_IN_PLACE[spec.activation]
        self.layers: list = []
        self._init_whitening(spec)
        self._init_action_mask(spec)

    def set_weights(self, weights: dict) -> None:
        self.layers = _layers(weights, self.dtype)
        # Both towers read the same observation: one matmul for their first layers, side by side.
        w, b = self.layers[0]
        actor_w = w[0]
        if self.spec.actor_inputs is not None:  # a centralised critic: the actor reads the leading inputs
            actor_w = np.where(np.arange(len(actor_w))[:, None] < self.spec.actor_inputs, actor_w, 0.0)
        self._first_w = np.ascontiguousarray(self._first_layer_rows(np.concatenate([actor_w, w[1]], axis=1)))
        self.value_mean, self.value_std = 0.0, 1.0
        if self.spec.value_norm:  # the critic predicts normalised returns (ActorCritic.denormalised)
            self.value_mean = float(np.asarray(weights["value_normalizer.mean"])[0])
            self.value_std = float(
                np.sqrt(np.asarray(weights["value_normalizer.var"], np.float64)[0] + VALUE_NORM_EPSILON)
            )
        self._first_b = np.concatenate([b[0, 0], b[1, 0]])
        self._set_whitening(weights)
        self.set_choice_weights(weights)

    def outputs(self, obs: np.ndarray, state=None):
        """Actor outputs [N, A] and values [N], in `dtype`."""
        # float64: BLAS kernels round differently for different batch sizes; in double precision
        # the differences vanish when results are stored as float32, so a worker with 2
        # environments acts exactly like one with 8 (same seed, same batch in every parallel mode).
        obs = np.asarray(obs, self.dtype)
        if self.pixels:
            obs = obs / 255.0
        size, width = self.spec.action.size, self._first_b.size // 2
        x = obs @ self._first_w
        x += self._first_b  # in place, here and below: the same numbers, one allocation less
        if len(self.layers) == 1:  # no hidden layers
            return self._masked(x[:, :size], obs), self._values(x[:, width])
        # Past the first layer each tower has its own input: [2, N, width], one batched matmul a layer.
        x = self.activate(x).reshape(len(obs), 2, width).transpose(1, 0, 2)
        for w, b in self.layers[1:-1]:
            x = np.matmul(x, w)
            x += b
            self.activate(x)
        w, b = self.layers[-1]
        x = np.matmul(x, w)  # the last layer is padded to max(actions, 1) columns
        x += b
        return self._masked(x[0, :, :size], obs), self._values(x[1, :, 0])

    def _values(self, critic: np.ndarray) -> np.ndarray:
        return critic * self.value_std + self.value_mean if self.spec.value_norm else critic


# A pre-activation each activation maps to exactly 1.0 in float32 (tanh(10) rounds to 1).
UNIT_PREACTIVATION = {"tanh": 10.0, "relu": 1.0, "elu": 1.0}


class NumpyPolicy32(NumpyPolicy):
    """`acting=numpy32`: the MLP actor-critic in float32 with every bias folded into its layer's
    product, so a step makes one whole-array call less per layer. The observations go in with a
    column of ones, and each hidden layer gets a constant unit (zero weights, a bias its activation
    maps to 1) that carries the next layer's bias; image bytes' 1/255 scaling is folded into the
    first layer. Rounds differently from the float64 copy (float32 results depend on the batch size
    anyway)."""

    def __init__(self, spec: PolicySpec):
        super().__init__(spec, dtype=np.float32)
        self._unit = UNIT_PREACTIVATION[spec.activation]
        self._rows = np.ones((0, spec.obs_dim + 1), np.float32)  # observations and a ones column, reused

    def set_weights(self, weights: dict) -> None:
        super().set_weights(weights)
        hidden = len(self.layers) > 1
        first_w = self._first_w / 255.0 if self.pixels else self._first_w
        first = np.concatenate([first_w, self._first_b[None]])  # [inputs + 1, 2 * width]
        if hidden:  # each tower's block gains its constant unit
            towers = first.reshape(len(first), 2, -1)
            units = np.zeros((len(first), 2, 1), np.float32)
            units[-1] = self._unit
            first = np.concatenate([towers, units], axis=2).reshape(len(first), -1)
        folded = [np.ascontiguousarray(first, np.float32)]
        for i, (w, b) in enumerate(self.layers[1:], start=1):
            layer = np.concatenate([w, b], axis=1)  # [2, inputs + 1, outputs]: the bias is the unit's row
            if i < len(self.layers) - 1:
                unit = np.zeros((2, len(layer[0]), 1), np.float32)
                unit[:, -1] = self._unit
                layer = np.concatenate([layer, unit], axis=2)
            folded.append(np.ascontiguousarray(layer, np.float32))
        self._folded = folded

    def outputs(self, obs: np.ndarray, state=None):
        """Actor outputs [N, A] and values [N], in float32."""
        if len(self._rows) != len(obs):
            self._rows = np.ones((len(obs), self.spec.obs_dim + 1), np.float32)
        rows = self._rows
        rows[:, :-1] = obs
        x = rows @ self._folded[0]
        size = self.spec.action.size
        if len(self._folded) == 1:  # no hidden layers
            return self._masked(x[:, :size], obs), self._values(x[:, x.shape[1] // 2])
        x = self.activate(x).reshape(len(obs), 2, -1).transpose(1, 0, 2)
        for w in self._folded[1:-1]:
            x = self.activate(np.matmul(x, w))
        x = np.matmul(x, self._folded[-1])
        return self._masked(x[0, :, :size], obs), self._values(x[1, :, 0])
