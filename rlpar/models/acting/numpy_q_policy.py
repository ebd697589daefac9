"""The acting copy of a Q-network, in numpy: ε-greedy (EpsilonGreedyChoice, numpy_acting.py) on
the learner's latest weights, with the MLP trunk or the CNN encoder (numpy_cnn.py).

ε arrives with the weights (`epsilon`: one value, or one per environment of the run, which is
how Ape-X gives each actor its own rate); `env_ids` are the environments this copy steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlpar.models.acting.numpy_acting import ACTIVATIONS, EpsilonGreedyChoice

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.q_spec import QNetworkSpec


class NumpyQPolicy(EpsilonGreedyChoice):
    """`dtype`: float64, or float32 with `acting=numpy32` (see NumpyPolicy)."""

    def __init__(self, spec: QNetworkSpec, env_ids=None, dtype=np.float64):
        super().__init__(env_ids)
        self.spec = spec
        self.dtype = np.dtype(dtype)
        self.activation = ACTIVATIONS[spec.activation]
        self.pixels = spec.obs_dtype == "uint8"
        self.encoder = None
        if spec.chosen_encoder != "mlp":
            from rlpar.models.acting.numpy_cnn import NumpyEncoder

            self.encoder = NumpyEncoder(spec.chosen_encoder, spec.image_shape, spec.channels_last, self.dtype)
        self.layers: list = []
        self._init_action_mask(spec)

    def set_weights(self, weights: dict) -> None:
        # float64 by default: results then do not depend on the batch size (see NumpyPolicy.outputs).
        array = lambda name: np.asarray(weights[name], self.dtype)  # noqa: E731
        if self.encoder is not None:
            self.encoder.set_weights(weights)
        else:
            trunk = sorted({int(k.split(".")[1]) for k in weights if k.startswith("trunk.")})
            self.layers = [(array(f"trunk.{i}.weight").T.copy(), array(f"trunk.{i}.bias")) for i in trunk]
        self.heads = q_heads(weights, self.dtype)
        self.set_choice_weights(weights)

    def features(self, obs: np.ndarray) -> np.ndarray:
        if self.encoder is not None:
            return self.encoder(obs)
        x = np.asarray(obs, self.dtype)
        if self.pixels:  # image bytes fed to the MLP, scaled as in torch
            x = x / 255.0
        if self._input_keep is not None:  # the network does not read the mask
            x = x * self._input_keep
        for w, b in self.layers:
            x = self.activation(x @ w + b)
        return x

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return q_from_features(self.features(obs), self.heads)

    def outputs(self, obs: np.ndarray, state=None) -> tuple:
        return (self._masked(self.q_values(obs), obs),)


def q_heads(weights: dict, dtype=np.float64) -> tuple:
    """The advantage head and (dueling) the value head of a Q-network's state dict, in `dtype`."""
    array = lambda name: np.asarray(weights[name], dtype)  # noqa: E731
    value = (array("value.weight").T.copy(), array("value.bias")) if "value.weight" in weights else None
    return (array("advantage.weight").T.copy(), array("advantage.bias")), value


def q_from_features(x: np.ndarray, heads: tuple) -> np.ndarray:
    """Q-values [N, A] of features [N, F]: linear, or dueling (as q_network.QNetwork.heads)."""
    (w_a, b_a), value = heads
    advantage = x @ w_a + b_a
    if value is None:
        return advantage
    return x @ value[0] + value[1] + advantage - advantage.mean(axis=1, keepdims=True)
