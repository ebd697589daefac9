"""The acting copy of an actor_q model's actor (SAC, TD3), in numpy (float64 as every copy, or
float32 with `acting=numpy32`).

Exploration comes with the weights: `noise_scale` (one value, or one per environment of the
run, which is how the Ape-X-style mode gives each actor its own) multiplies SAC's own Gaussian
noise, or is TD3's Gaussian noise added to the tanh action; `random_actions` (before
`learning_starts`) turns each environment's standard normals into uniform actions, erf(n / √2)
being uniform on (-1, 1). Without noise (evaluation) the action is tanh of the mean.
"""

from __future__ import annotations

from math import sqrt
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import erf

from rlpar.models.acting.numpy_acting import ACTIVATIONS, NumpyActing
from rlpar.models.constants import LOG_STD_BOUNDS

if TYPE_CHECKING:  # the spec builds this class: importing it here would be a circle
    from rlpar.models.actor_q_spec import ActorQSpec


class ActorChoice(NumpyActing):
    """Actions from the actor's outputs (mean [N, A] and log-std [N, A] or None) and standard
    normals [N, A]; log-probabilities and values are not used off-policy (zeros)."""

    def __init__(self, env_ids=None):
        self.env_ids = None if env_ids is None else np.asarray(env_ids)
        self.noise_scale = np.ones((1, 1))
        self.random_actions = True

    def set_choice_weights(self, weights: dict) -> None:
        scale = np.atleast_1d(np.asarray(weights.get("noise_scale", 1.0), np.float64))
        if len(scale) > 1 and self.env_ids is not None:
            scale = scale[self.env_ids]
        self.noise_scale = scale[:, None]
        self.random_actions = bool(weights.get("random_actions", False))

    def values(self, outputs: tuple) -> np.ndarray:
        return np.zeros(len(outputs[0]), np.float32)

    def choose(self, outputs: tuple, noise: np.ndarray | None):
        mean, log_std = outputs
        if noise is None:
            actions = np.tanh(mean)
        elif self.random_actions:
            actions = erf(noise / sqrt(2.0))
        elif log_std is not None:
            actions = np.tanh(mean + self.noise_scale * np.exp(log_std) * noise)
        else:
            actions = np.minimum(np.maximum(np.tanh(mean) + self.noise_scale * noise, -1.0), 1.0)
        zeros = np.zeros(len(mean), np.float32)
        return actions.astype(np.float32), zeros, zeros

    def replay_priorities(self, transitions: dict) -> np.ndarray:
        """Equal: the actor has no critic to rank its transitions with (the shards sample
        uniformly unless the learner sends priorities back)."""
        return np.ones(len(transitions["rewards"]))


class NumpyActor(ActorChoice):
    def __init__(self, spec: ActorQSpec, env_ids=None, dtype=np.float64):
        super().__init__(env_ids)
        self.spec = spec
        self.dtype = np.dtype(dtype)
        self.activation = ACTIVATIONS[spec.activation]
        self.layers: list = []

    def set_weights(self, weights: dict) -> None:
        array = lambda name: np.asarray(weights[name], self.dtype)  # noqa: E731
        trunk = sorted({int(k.split(".")[2]) for k in weights if k.startswith("actor.trunk.")})
        self.layers = [(array(f"actor.trunk.{i}.weight").T.copy(), array(f"actor.trunk.{i}.bias")) for i in trunk]
        self.mean = (array("actor.mean.weight").T.copy(), array("actor.mean.bias"))
        self.log_std = (
            (array("actor.log_std.weight").T.copy(), array("actor.log_std.bias")) if self.spec.gaussian else None
        )
        self.set_choice_weights(weights)

    def outputs(self, obs: np.ndarray, state=None) -> tuple:
        x = np.asarray(obs, self.dtype)
        for w, b in self.layers:
            x = self.activation(x @ w + b)
        log_std = None
        if self.log_std is not None:
            log_std = np.minimum(
                np.maximum(x @ self.log_std[0] + self.log_std[1], LOG_STD_BOUNDS[0]), LOG_STD_BOUNDS[1]
            )
        return x @ self.mean[0] + self.mean[1], log_std
