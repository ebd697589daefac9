"""The acting copy of a Q-network, in numpy: ε-greedy on the learner's latest weights.

ε arrives with the weights (`epsilon`: one value, or one per environment of the run, which is
how Ape-X gives each actor its own rate); `env_ids` are the environments this copy steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlpar.models.numpy_acting import ACTIVATIONS, NumpyActing

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.q_spec import QNetworkSpec


class NumpyQPolicy(NumpyActing):
    def __init__(self, spec: QNetworkSpec, env_ids=None):
        self.spec = spec
        self.env_ids = None if env_ids is None else np.asarray(env_ids)
        self.activation = ACTIVATIONS[spec.activation]
        self.layers: list = []
        self.value_head = None
        self.epsilon = np.ones(1)

    def set_weights(self, weights: dict) -> None:
        trunk = sorted({int(k.split(".")[1]) for k in weights if k.startswith("trunk.")})
        # float64: results then do not depend on the batch size (see NumpyPolicy.outputs).
        as64 = lambda name: np.asarray(weights[name], np.float64)  # noqa: E731
        self.layers = [(as64(f"trunk.{i}.weight").T.copy(), as64(f"trunk.{i}.bias")) for i in trunk]
        self.advantage_head = (as64("advantage.weight").T.copy(), as64("advantage.bias"))
        self.value_head = (as64("value.weight").T.copy(), as64("value.bias")) if "value.weight" in weights else None
        epsilon = np.atleast_1d(np.asarray(weights.get("epsilon", 0.0), np.float64))
        self.epsilon = epsilon[self.env_ids] if len(epsilon) > 1 and self.env_ids is not None else epsilon

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        x = obs.astype(np.float64)
        for w, b in self.layers:
            x = self.activation(x @ w + b)
        advantage = x @ self.advantage_head[0] + self.advantage_head[1]
        if self.value_head is None:
            return advantage
        return x @ self.value_head[0] + self.value_head[1] + advantage - advantage.mean(axis=1, keepdims=True)

    def outputs(self, obs: np.ndarray) -> tuple:
        return (self.q_values(obs),)

    def choose(self, outputs: tuple, noise: np.ndarray | None):
        """ε-greedy actions from one uniform per environment: below ε it explores, and u/ε,
        itself uniform, picks the action. Log-probabilities are not used by Q-learning (zeros);
        values are max_a Q."""
        (q,) = outputs
        actions = q.argmax(axis=1)
        if noise is not None:
            explore = noise < self.epsilon
            random_actions = np.minimum((noise / np.maximum(self.epsilon, 1e-12) * q.shape[1]).astype(np.int64),
                                        q.shape[1] - 1)
            actions = np.where(explore, random_actions, actions)
        return actions, np.zeros(len(q), np.float32), q.max(axis=1).astype(np.float32)
