"""A3C's worker: acts like any rollout worker, then computes the actor-critic gradient of its own
rollout with a torch copy of the model, and sends the gradient instead of the data.

Where the gradient goes: to the parameter server whose address (rlpar.sampling.services) comes
with the weights as `parameter_server`. The worker applies its gradient there itself and adopts
the newest weights the server answers with; one it shares memory with (Hogwild,
parallel=multiprocess) it reads before each rollout instead. Given plain weights, the gradient
travels back with the batch (`Batch.extras`).
"""

from __future__ import annotations

import sys

import numpy as np

from rlpar.errors import ServiceLost
from rlpar.learning.estimators.rewards import clip_rewards
from rlpar.sampling.batch import raw_obs_moments
from rlpar.sampling.rollout import RolloutWorker


class GradientWorker(RolloutWorker):
    def __init__(
        self,
        *,
        objective,
        reward_scale: float = 1.0,
        reward_clip: float | None = None,
        precision: str = "fp32",
        **rollout_kwargs,
    ):
        """`objective`: what the worker differentiates (ActorCriticLoss, NStepQLoss): its
        `model_names` and `loss(models, batch, rewards) -> (loss, statistics)`; `precision`: fp32
        or bf16, the loss computed under autocast (rlpar.learning.optimization.precision), the gradient float32."""
        own_process = "torch" not in sys.modules  # a worker process of its own, not the learner's
        import torch

        if own_process:
            torch.set_num_threads(1)  # many workers share the cores
        super().__init__(**rollout_kwargs)
        self.torch = torch
        # the trained model, and any other the objective reads (n-step Q: the target network)
        self.models = {name: self.policy_spec.build() for name in objective.model_names}
        self.model = self.models["model"]
        self.parameters = list(self.model.parameters())
        self.objective, self.reward_scale, self.reward_clip = objective, reward_scale, reward_clip
        self.precision = precision
        self.acting: dict = {}  # what the acting policy takes beside the weights (ε per environment)
        self.server = None  # the parameter server's address

    def set_weights(self, weights: dict, version: int) -> None:
        """The learner's weights, or the parameter server's address: a new server, or a
        restarted one, is asked for its weights (and the opponent pool taken, where one rides along)."""
        self.take_opponent_pool(weights)
        self.acting = weights.get("acting", self.acting)
        server = weights.get("parameter_server")
        if server is None:
            self.adopt(weights, version)
        elif self.server is None or server.generation != self.server.generation:
            self.server = server
            try:
                self.adopt(*server.call("weights"))
            except ServiceLost:
                pass  # it died already: the learner restarts it and sends the new address

    def adopt(self, weights: dict, version: int) -> None:
        """Weights from the server: the model's, and `<name>.`-prefixed ones for the others."""
        others = tuple(name for name in self.models if name != "model")
        own = {k: v for k, v in weights.items() if k != "acting" and not k.startswith(tuple(f"{n}." for n in others))}
        super().set_weights({**own, **self.acting}, version)  # the numpy acting policy
        self.model.load_state_dict({k: self.torch.as_tensor(v) for k, v in own.items()})
        for name in others:
            prefix = f"{name}."
            self.models[name].load_state_dict(
                {k[len(prefix) :]: self.torch.as_tensor(v) for k, v in weights.items() if k.startswith(prefix)}
            )

    def sample(self, out=None):
        if self.server is not None and self.server.shared:
            self.adopt(*self.server.call("weights"))
        batch = super().sample(out)
        gradients, stats = self.gradients(batch)
        moments = raw_obs_moments(batch)
        if self.server is None:
            batch.extras = {"gradients": [gradients], "obs_moments": [moments], "loss": [stats]}
            return batch
        try:
            answer = self.server.call("apply", gradients, self.policy_version, batch.num_steps, moments)
        except ServiceLost:
            batch.extras = {"server_lost": [self.server.generation]}
            return batch
        if "weights" in answer:  # (shared memory: read before the next rollout instead)
            self.adopt(answer["weights"], answer["version"])
        batch.extras = {
            "staleness": [answer["staleness"]],
            "server_version": [answer["version"]],
            "loss": [stats],
            "nonfinite_updates": [answer["nonfinite_updates"]],
        }
        return batch

    def gradients(self, batch) -> tuple[list[np.ndarray], dict]:
        """The gradient of the objective on this rollout (one array per parameter of the model)
        and the loss's statistics."""
        from rlpar.learning.optimization.precision import autocast  # (torch: imported once the worker runs)

        with autocast(self.precision, device_type="cpu"):
            loss, stats = self.objective.loss(
                self.models, batch, clip_rewards(batch.rewards, self.reward_clip) * np.float32(self.reward_scale)
            )
        self.model.zero_grad(set_to_none=True)
        loss.backward()
        return [p.grad.numpy() for p in self.parameters], stats
