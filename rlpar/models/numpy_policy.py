"""The acting copy of the policy, in numpy.

Workers only run forward passes on a handful of observations at a time; at that size numpy
is several times faster per step than torch here, and workers need not import torch at all
(which makes subprocess and Ray-actor start-up cheap). It reads the torch module's state dict,
so the two must agree on its layout (stacked actor/critic towers, see actor_critic.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the spec builds these classes: importing it here would be a circle
    from rlpar.models.spec import PolicySpec


from rlpar.models.numpy_acting import ACTIVATIONS, VALUE_NORM_EPSILON, PolicyChoice


def _layers(weights: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight [2, in, out], bias [2, 1, out]) per layer of ActorCritic's stacked state dict."""
    count = sum(1 for k in weights if k.startswith("weights."))
    return [(np.asarray(weights[f"weights.{i}"], np.float64), np.asarray(weights[f"biases.{i}"], np.float64))
            for i in range(count)]


class WhitenedObservations:
    """Observations whitened with the statistics that arrive with the weights (`normalize_obs`),
    clipped as the learner's ObservationNormalizer does."""

    clip_obs, epsilon = 10.0, 1e-8

    def _init_whitening(self, spec) -> None:
        self.obs_mean = np.zeros(spec.obs_dim, np.float32)
        self.obs_inv_std = np.ones(spec.obs_dim, np.float32)

    def _set_whitening(self, weights: dict) -> None:
        if self.spec.normalize_obs:
            self.obs_mean = np.asarray(weights["obs_normalizer.mean"], np.float32)
            var = np.asarray(weights["obs_normalizer.var"], np.float64)
            self.obs_inv_std = (1.0 / np.sqrt(var + self.epsilon)).astype(np.float32)

    def normalize(self, raw_obs: np.ndarray) -> np.ndarray:
        if not self.spec.normalize_obs:
            return raw_obs
        return np.minimum(np.maximum((raw_obs - self.obs_mean) * self.obs_inv_std, -self.clip_obs), self.clip_obs)


class NumpyPolicy(WhitenedObservations, PolicyChoice):
    """The MLP actor-critic; actions chosen by PolicyChoice (numpy_acting.py)."""

    def __init__(self, spec: PolicySpec):
        super().__init__(spec.action)
        self.spec = spec
        self.pixels = spec.obs_dtype == "uint8"  # image bytes fed to the MLP: scaled to [0, 1] as in torch
        self.activation = ACTIVATIONS[spec.activation]
        self.layers: list = []
        self._init_whitening(spec)

    def set_weights(self, weights: dict) -> None:
        self.layers = _layers(weights)
        # Both towers read the same observation: one matmul for their first layers, side by side.
        w, b = self.layers[0]
        actor_w = w[0]
        if self.spec.actor_inputs is not None:  # a centralised critic: the actor reads the leading inputs
            actor_w = np.where(np.arange(len(actor_w))[:, None] < self.spec.actor_inputs, actor_w, 0.0)
        self._first_w = np.ascontiguousarray(np.concatenate([actor_w, w[1]], axis=1))
        self.value_mean, self.value_std = 0.0, 1.0
        if self.spec.value_norm:  # the critic predicts normalised returns (ActorCritic.denormalised)
            self.value_mean = float(np.asarray(weights["value_normalizer.mean"])[0])
            self.value_std = float(np.sqrt(np.asarray(weights["value_normalizer.var"], np.float64)[0] + VALUE_NORM_EPSILON))
        self._first_b = np.concatenate([b[0, 0], b[1, 0]])
        self._set_whitening(weights)
        self.set_choice_weights(weights)

    def outputs(self, obs: np.ndarray, state=None):
        """Actor outputs [N, A] and values [N], in float64."""
        # float64: BLAS kernels round differently for different batch sizes; in double precision
        # the differences vanish when results are stored as float32, so a worker with 2
        # environments acts exactly like one with 8 (same seed, same batch in every parallel mode).
        obs = obs.astype(np.float64)
        if self.pixels:
            obs /= 255.0
        size, width = self.spec.action.size, self._first_b.size // 2
        x = obs @ self._first_w + self._first_b
        if len(self.layers) == 1:  # no hidden layers
            return x[:, :size], self._values(x[:, width])
        # Past the first layer each tower has its own input: [2, N, width], one batched matmul a layer.
        x = self.activation(x).reshape(len(obs), 2, width).transpose(1, 0, 2)
        for w, b in self.layers[1:-1]:
            x = self.activation(np.matmul(x, w) + b)
        w, b = self.layers[-1]
        x = np.matmul(x, w) + b  # the last layer is padded to max(actions, 1) columns
        return x[0, :, :size], self._values(x[1, :, 0])

    def _values(self, critic: np.ndarray) -> np.ndarray:
        return critic * self.value_std + self.value_mean if self.spec.value_norm else critic
