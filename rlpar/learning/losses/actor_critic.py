"""The advantage actor-critic objective, shared by A2C's learner and A3C's gradient workers so
that both compute exactly the same gradient from the same rollout."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlpar.learning.estimators.batch_tensors import advantage_inputs, explained_variance
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.estimators.nstep import compute_nstep_returns
from rlpar.learning.estimators.sequences import evaluate_steps, step_tensors, valid_steps
from rlpar.learning.losses.ppo_loss import normalize, policy_gradient_loss, value_loss

ADVANTAGES = ("nstep", "gae")


@dataclass(frozen=True)
class ActorCriticLoss:
    gamma: float = 0.99
    advantage: str = "nstep"  # nstep | gae
    n_steps: int | None = None  # nstep: None means up to the end of the rollout (classic A2C)
    gae_lambda: float = 1.0
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    normalize_advantages: bool = False
    model_names = ("model",)  # what a gradient worker keeps a copy of

    def __post_init__(self):
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"advantage must be one of {', '.join(ADVANTAGES)}, got {self.advantage!r}")

    def targets(self, batch, rewards):
        """Advantages and value targets of a rollout ([T, N] numpy), from the rewards the loss
        sees: n-step returns, or GAE(gamma, gae_lambda)."""
        inputs = advantage_inputs(batch, rewards)
        if self.advantage == "gae":
            return compute_gae(**inputs, gamma=self.gamma, gae_lambda=self.gae_lambda)
        return compute_nstep_returns(**inputs, gamma=self.gamma, n_steps=self.n_steps or batch.rewards.shape[0])

    def inputs(self, batch, advantages, returns, device, recurrent: bool = False) -> dict:
        """The loss's tensors: the rollout's valid steps only; for a recurrent model, the whole
        rollout as one sequence per environment, unrolled from the state stored at its start."""
        return step_tensors(
            {"obs": batch.obs, "actions": batch.actions, "advantages": advantages, "returns": returns},
            valid=batch.valid,
            states=batch.states,
            length=None,
            device=device,
            recurrent=recurrent,
        )

    def loss(self, models: dict, batch, rewards):
        """A gradient worker's view: (the loss on this rollout, its parts and the critic's
        explained variance, as logged)."""
        advantages, returns = self.targets(batch, rewards)
        model = models["model"]
        loss, parts = self(model, **self.inputs(batch, advantages, returns, "cpu", recurrent=model.recurrent))
        keep = batch.valid.reshape(-1)
        loss_policy, loss_value, loss_entropy = parts.tolist()
        return loss, {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": loss_entropy,
            "explained_variance": explained_variance(batch.values.reshape(-1)[keep], returns.reshape(-1)[keep]),
        }

    def __call__(self, model, obs, actions, advantages, returns, initial_state=None, valid=None, normalized=normalize):
        """(loss, its parts [policy, value, entropy] detached): policy gradient + value_coef x
        value regression - entropy_coef x entropy. A recurrent model's inputs are pieces of
        sequences ([L, P] arrays, `initial_state` and `valid`: rlpar.learning.estimators.sequences), the
        loss over their valid steps. `normalized`: how advantages are normalised (over every
        learner's steps in a learner group: rlpar.learning.peers)."""
        logp, entropy, values = evaluate_steps(
            model, {"obs": obs, "actions": actions, "initial_state": initial_state, "valid": valid}
        )
        advantages, returns = valid_steps(advantages, valid), valid_steps(returns, valid)
        if self.normalize_advantages:
            advantages = normalized(advantages)
        p_loss = policy_gradient_loss(logp, advantages)
        v_loss = value_loss(values, returns, None, None)
        entropy = entropy.mean()
        loss = p_loss + self.value_coef * v_loss - self.entropy_coef * entropy
        return loss, torch.stack((p_loss, v_loss, entropy)).detach()
