"""The acting copy of a Q-network, in numpy: ε-greedy (EpsilonGreedyChoice, numpy_acting.py) on
the learner's latest weights, with the MLP trunk or the CNN encoder (numpy_cnn.py).

ε arrives with the weights (`epsilon`: one value, or one per environment of the run, which is
how Ape-X gives each actor its own rate); `env_ids` are the environments this copy steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlpar.models.numpy_acting import ACTIVATIONS, EpsilonGreedyChoice

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.q_spec import QNetworkSpec


class NumpyQPolicy(EpsilonGreedyChoice):
    def __init__(self, spec: QNetworkSpec, env_ids=None):
        super().__init__(env_ids)
        self.spec = spec
        self.activation = ACTIVATIONS[spec.activation]
        self.pixels = spec.obs_dtype == "uint8"
        self.encoder = None
        if spec.chosen_encoder != "mlp":
            from rlpar.models.numpy_cnn import NumpyEncoder

            self.encoder = NumpyEncoder(spec.chosen_encoder, spec.image_shape, spec.channels_last)
        self.layers: list = []

    def set_weights(self, weights: dict) -> None:
        # float64: results then do not depend on the batch size (see NumpyPolicy.outputs).
        as64 = lambda name: np.asarray(weights[name], np.float64)  # noqa: E731
        if self.encoder is not None:
            self.encoder.set_weights(weights)
        else:
            trunk = sorted({int(k.split(".")[1]) for k in weights if k.startswith("trunk.")})
            self.layers = [(as64(f"trunk.{i}.weight").T.copy(), as64(f"trunk.{i}.bias")) for i in trunk]
        self.heads = q_heads(weights)
        self.set_choice_weights(weights)

    def features(self, obs: np.ndarray) -> np.ndarray:
        if self.encoder is not None:
            return self.encoder(obs)
        x = obs.astype(np.float64)
        if self.pixels:  # image bytes fed to the MLP, scaled as in torch
            x /= 255.0
        for w, b in self.layers:
            x = self.activation(x @ w + b)
        return x

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return q_from_features(self.features(obs), self.heads)

    def outputs(self, obs: np.ndarray, state=None) -> tuple:
        return (self.q_values(obs),)


def q_heads(weights: dict) -> tuple:
    """The advantage head and (dueling) the value head of a Q-network's state dict, float64."""
    as64 = lambda name: np.asarray(weights[name], np.float64)  # noqa: E731
    value = (as64("value.weight").T.copy(), as64("value.bias")) if "value.weight" in weights else None
    return (as64("advantage.weight").T.copy(), as64("advantage.bias")), value


def q_from_features(x: np.ndarray, heads: tuple) -> np.ndarray:
    """Q-values [N, A] of features [N, F]: linear, or dueling (as q_network.QNetwork.heads)."""
    (w_a, b_a), value = heads
    advantage = x @ w_a + b_a
    if value is None:
        return advantage
    return x @ value[0] + value[1] + advantage - advantage.mean(axis=1, keepdims=True)
