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
        self.value_head = None

    def set_weights(self, weights: dict) -> None:
        # float64: results then do not depend on the batch size (see NumpyPolicy.outputs).
        as64 = lambda name: np.asarray(weights[name], np.float64)  # noqa: E731
        if self.encoder is not None:
            self.encoder.set_weights(weights)
        else:
            trunk = sorted({int(k.split(".")[1]) for k in weights if k.startswith("trunk.")})
            self.layers = [(as64(f"trunk.{i}.weight").T.copy(), as64(f"trunk.{i}.bias")) for i in trunk]
        self.advantage_head = (as64("advantage.weight").T.copy(), as64("advantage.bias"))
        self.value_head = (as64("value.weight").T.copy(), as64("value.bias")) if "value.weight" in weights else None
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
        x = self.features(obs)
        advantage = x @ self.advantage_head[0] + self.advantage_head[1]
        if self.value_head is None:
            return advantage
        return x @ self.value_head[0] + self.value_head[1] + advantage - advantage.mean(axis=1, keepdims=True)

    def outputs(self, obs: np.ndarray) -> tuple:
        return (self.q_values(obs),)
