"""Acting copies that run the learner's torch module (float32) instead of numpy, for the large
CNN encoders (`acting=torch`, and what `auto` picks for `nature` and `impala`; the measurements
behind that choice are in numpy_cnn.py). Actions are chosen by the same numpy maths as the
numpy copies (PolicyChoice, EpsilonGreedyChoice).

The trade-off: float32 convolutions round differently for different batch sizes (docs/benchmarks.md,
"Figures behind design choices"), so a run's batches then depend on how its environments are split over
workers (the same split and seed still repeat). The numpy float64 copies give bit-identical batches however the
environments are split.

torch is imported here only when such a copy is made. A worker runs it on one thread: a
subprocess (`parallel=multiprocess`, forked with torch already imported) or a process that had not
imported torch yet (a Ray env runner); in the learner's own process (`parallel=local`, central
inference on a CPU, evaluation) the learner's setting is left alone.
"""

from __future__ import annotations

import multiprocessing
import sys

import numpy as np

from rlpar.models.acting.numpy_acting import EpsilonGreedyChoice, PolicyChoice


def module_outputs(torch, module, obs: np.ndarray, state: np.ndarray | None, device="cpu") -> tuple:
    """A torch module's acting outputs for normalised observations, as float64 arrays (what
    `choose` takes); a recurrent module's `state` ([N, S] float64) advances in place. Shared by
    the torch acting copies and central inference's torch backend."""
    with torch.inference_mode():
        x = torch.as_tensor(obs, device=device)
        if state is None:
            outputs = module.acting_outputs(x)
        else:
            outputs, next_state = module.acting_outputs(x, torch.as_tensor(state, dtype=torch.float32, device=device))
            state[:] = next_state.to("cpu", torch.float64).numpy()
    return tuple(o.to("cpu", torch.float64).numpy() for o in outputs)


class TorchActing:
    """`outputs` from a CPU copy of `spec.build()`, loaded from the state dict of numpy arrays."""

    def _init_module(self, spec) -> None:
        worker = "torch" not in sys.modules or multiprocessing.parent_process() is not None
        import torch

        if worker:  # a process that had no torch yet (a Ray env runner), or a worker subprocess
            torch.set_num_threads(1)
        self.torch = torch
        self.module = spec.build().requires_grad_(False).eval()
        self.state_size = self.module.state_size
        self.module_keys = set(self.module.state_dict())

    def _load(self, weights: dict) -> None:
        torch = self.torch
        state = {k: torch.tensor(np.asarray(v)) for k, v in weights.items() if k in self.module_keys}
        self.module.load_state_dict(state)

    def outputs(self, obs: np.ndarray, state: np.ndarray | None = None) -> tuple:
        return module_outputs(self.torch, self.module, obs, state)


class TorchPolicy(TorchActing, PolicyChoice):
    """An actor-critic acting with its torch module (images: `normalize` is the identity)."""

    def __init__(self, spec):
        PolicyChoice.__init__(self, spec.action)
        self.spec = spec
        self._init_module(spec)
        self._init_action_mask(spec)  # the module masks its outputs; the choice keeps draws legal

    def set_weights(self, weights: dict) -> None:
        self._load(weights)
        self.set_choice_weights(weights)


class TorchQPolicy(TorchActing, EpsilonGreedyChoice):
    """A Q-network acting ε-greedily with its torch module."""

    def __init__(self, spec, env_ids=None):
        EpsilonGreedyChoice.__init__(self, env_ids)
        self.spec = spec
        self._init_module(spec)
        self._init_action_mask(spec)  # the module masks its Q-values; ε-random actions stay legal

    def set_weights(self, weights: dict) -> None:
        self._load(weights)
        self.set_choice_weights(weights)
