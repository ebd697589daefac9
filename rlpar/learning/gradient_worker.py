"""A3C's worker: acts like any rollout worker, then computes the actor-critic gradient of its own
rollout with a torch copy of the model, and sends the gradient instead of the data.

With a parameter server handle (a Ray actor, parallel=distributed, sent with the weights) the
worker applies its gradient there itself and takes the newest weights back at once; otherwise
(parallel=local and multiprocess) the gradient travels back with the batch (`Batch.extras`) to
the learner, which holds the parameter server. Either way the rollout's arrays are not needed
by anyone else once the gradient exists.
"""

from __future__ import annotations

import sys

import numpy as np

from rlpar.sampling.batch import raw_obs_moments
from rlpar.sampling.rollout import RolloutWorker


class GradientWorker(RolloutWorker):
    def __init__(self, *, objective, reward_scale: float = 1.0, **rollout_kwargs):
        """`objective`: the ActorCriticLoss whose gradient the worker computes."""
        own_process = "torch" not in sys.modules  # a worker process of its own, not the learner's
        import torch

        if own_process:
            torch.set_num_threads(1)  # many workers share the cores
        super().__init__(**rollout_kwargs)
        self.torch = torch
        self.model = self.policy_spec.build()
        self.parameters = list(self.model.parameters())
        self.objective, self.reward_scale = objective, reward_scale
        self.server = None  # a Ray handle of the parameter server (parallel=distributed)
        self.server_generation = -1

    def set_weights(self, weights: dict, version: int) -> None:
        """The learner's weights, or (distributed) the parameter server's handle: a new server,
        or a restarted one, is asked for its weights."""
        if "parameter_server" not in weights:
            self.adopt(weights, version)
        elif weights["server_generation"] != self.server_generation:
            import ray

            self.server, self.server_generation = weights["parameter_server"], weights["server_generation"]
            try:
                self.adopt(*ray.get(self.server.weights.remote()))
            except ray.exceptions.RayActorError:
                pass  # it died already: the learner restarts it and sends the new handle

    def adopt(self, weights: dict, version: int) -> None:
        super().set_weights(weights, version)  # the numpy acting policy
        self.model.load_state_dict({k: self.torch.as_tensor(v) for k, v in weights.items()})

    def sample(self, out=None):
        batch = super().sample(out)
        gradients, stats = self.gradients(batch)
        moments = raw_obs_moments(batch)
        if self.server is None:
            batch.extras = {"gradients": [gradients], "obs_moments": [moments], "loss": [stats]}
            return batch
        import ray

        try:
            answer = ray.get(self.server.apply.remote(gradients, self.policy_version, batch.num_steps, moments))
        except ray.exceptions.RayActorError:
            batch.extras = {"server_lost": [self.server_generation]}
            return batch
        self.adopt(answer["weights"], answer["version"])
        batch.extras = {"staleness": [answer["staleness"]], "server_version": [answer["version"]], "loss": [stats],
                        "nonfinite_updates": [answer["nonfinite_updates"]]}
        return batch

    def gradients(self, batch) -> tuple[list[np.ndarray], dict]:
        """The gradient of the objective on this rollout (one array per parameter), and the
        loss's parts and the critic's explained variance."""
        from rlpar.algos.base import explained_variance

        advantages, returns = self.objective.targets(batch, batch.rewards * np.float32(self.reward_scale))
        loss, parts = self.objective(self.model, **self.objective.inputs(batch, advantages, returns, "cpu"))
        self.model.zero_grad(set_to_none=True)
        loss.backward()
        keep = batch.valid.reshape(-1)
        loss_policy, loss_value, loss_entropy = parts.tolist()
        stats = {"loss_policy": loss_policy, "loss_value": loss_value, "loss_entropy": loss_entropy,
                 "explained_variance": explained_variance(batch.values.reshape(-1)[keep], returns.reshape(-1)[keep])}
        return [p.grad.numpy() for p in self.parameters], stats
