"""What the numpy acting policies share: activations and acting from raw observations.

An acting policy computes its network's `outputs` for normalised observations, then `choose`s
actions from those outputs and per-environment noise. Keeping the two apart lets a central
inference server (rlpar.sampling.inference) run the network in torch on a GPU and still choose
actions with exactly the same maths as the workers.
"""

from __future__ import annotations

import numpy as np

ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))),
}


class NumpyActing:
    def set_weights(self, weights: dict) -> None:
        raise NotImplementedError

    def normalize(self, raw_obs: np.ndarray) -> np.ndarray:
        return raw_obs

    def outputs(self, obs: np.ndarray) -> tuple:
        """The network's outputs (float64) for normalised observations."""
        raise NotImplementedError

    def choose(self, outputs: tuple, noise: np.ndarray | None):
        """Actions, log-probabilities and values from `outputs`; `noise=None` acts greedily."""
        raise NotImplementedError

    def act(self, obs: np.ndarray, noise: np.ndarray | None):
        return self.choose(self.outputs(obs), noise)

    def act_raw(self, raw_obs: np.ndarray, noise: np.ndarray | None):
        """Normalised observations, actions, log-probabilities and values for raw observations:
        the one call per step a rollout makes (the same whether the policy is here or central)."""
        obs = self.normalize(raw_obs)
        return (obs, *self.act(obs, noise))

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self.act(obs, None)[2]
