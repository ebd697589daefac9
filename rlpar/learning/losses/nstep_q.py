"""Asynchronous n-step Q-learning's objective (Mnih et al. 2016, Algorithm S3), computed by a
gradient worker on its own rollout: every step's target is its rewards up to the rollout's end
(at most `n_steps`), bootstrapped from the target network's best value there.

Truncation and autoreset follow compute_nstep_returns: the value after a truncated step is the
target network's of the real final observation, and autoreset steps are no transitions.

A recurrent Q-network (and its target) reads the rollout as one sequence per environment from
the state stored at its start (`Batch.states`), the state zeroed after autoreset steps as the
worker acted; the bootstrap value comes one step further, as the worker's own bootstrap call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlpar.learning.estimators.batch_tensors import advantage_inputs, valid_step_tensors
from rlpar.learning.estimators.nstep import compute_nstep_returns
from rlpar.learning.losses.q_targets import weighted_huber


@dataclass(frozen=True)
class NStepQLoss:
    gamma: float = 0.99
    n_steps: int | None = None  # None: up to the end of the rollout (the paper's t_max forward view)
    model_names = ("model", "target")  # the worker keeps a copy of both

    def targets(self, models: dict, batch, rewards):
        """[T, N] n-step targets, bootstrapped from the target network's max_a Q."""
        T, N = batch.rewards.shape
        target = models["target"]
        with torch.no_grad():
            if target.recurrent:
                q, final_state = rollout_q(target, batch)
                best = q.max(dim=2).values
                (last_q,) = target.outputs_after(
                    torch.as_tensor(batch.last_obs), final_state, torch.as_tensor(batch.valid[-1])
                )
                bootstrap = last_q.max(dim=1).values
            else:
                best = target(torch.as_tensor(batch.obs.reshape(T * N, -1))).max(dim=1).values
                bootstrap = target(torch.as_tensor(batch.last_obs)).max(dim=1).values
        inputs = {
            **advantage_inputs(batch, rewards),
            "values": best.numpy().reshape(T, N),
            "bootstrap_value": bootstrap.numpy(),
        }
        return compute_nstep_returns(**inputs, gamma=self.gamma, n_steps=self.n_steps or T)[1]

    def loss(self, models: dict, batch, rewards):
        """(Huber loss of Q(s, a) against the n-step targets, its statistics)."""
        returns = self.targets(models, batch, rewards)
        data = valid_step_tensors({"obs": batch.obs, "actions": batch.actions, "returns": returns}, batch.valid, "cpu")
        if models["model"].recurrent:  # Q of every step in sequence, then the valid steps (time-major, as data)
            q = rollout_q(models["model"], batch)[0][torch.as_tensor(batch.valid)]
        else:
            q = models["model"](data["obs"])
        q_taken = q.gather(1, data["actions"].unsqueeze(1)).squeeze(1)
        td_errors = data["returns"] - q_taken
        loss = weighted_huber(td_errors, torch.ones_like(td_errors))
        return loss, {
            "loss_q": float(loss.detach()),
            "td_error_mean": float(td_errors.detach().abs().mean()),
            "q_mean": float(q_taken.detach().mean()),
        }


def rollout_q(model, batch):
    """A recurrent Q-network's values [T, N, A] of a rollout's steps and its final state [N, S]."""
    return model.q_sequence(torch.as_tensor(batch.obs), torch.as_tensor(batch.states[0]), torch.as_tensor(batch.valid))
