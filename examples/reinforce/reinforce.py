"""REINFORCE with a learned baseline (Williams 1992; Sutton & Barto 2018, section 13.4), an
rlpar algorithm that lives outside rlpar (docs/extending.md).

One iteration: act with the current weights for `rollout_length` steps in every environment ->
the discounted return G_t of every step whose episode ends within the rollout -> one gradient
step on  -log pi(a_t|s_t) (G_t - V(s_t))  +  value_coef * (G_t - V(s_t))^2 / 2  -> new weights.
Steps of an episode still running when the rollout ends have no return yet and are left out:
A2C would complete them with V instead, which is the whole difference between the two.

Run it from this directory:
    python <rlpar clone>/main.py hydra.searchpath=[file://$PWD/conf] algo=reinforce
"""

from __future__ import annotations

import numpy as np
import torch

from rlpar.algos.base import Algorithm, StepResult
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.optimization.optim import adam
from rlpar.learning.losses.ppo_loss import normalize, policy_gradient_loss, value_loss


class Reinforce(Algorithm):
    def __init__(
        self,
        *,
        sampler,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        lr: float = 1e-2,
        gamma: float = 0.99,
        value_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        normalize_advantages: bool = True,
        precision: str = "fp32",
    ):
        super().__init__(sampler=sampler, policy_spec=policy_spec, total_steps=total_steps, seed=seed,
                         device=device, gamma=gamma)
        self.gamma, self.value_coef, self.normalize_advantages = gamma, value_coef, normalize_advantages
        self.set_optimizer(adam(self.parameters, lr=lr), max_grad_norm=max_grad_norm, max_consecutive_nonfinite=20,
                           precision=precision)  # fp32, bf16 or fp16 (torch.autocast; fp16 with a loss scaler)

    def training_step(self) -> StepResult:
        batch, metrics = self.sample()  # [T, N] arrays acted by the current weights, and the sampler's timings
        metrics.update(self.update(batch))
        return StepResult(batch.num_steps, batch.episode_returns, batch.episode_lengths, metrics)

    def update(self, batch) -> dict:
        self.steps_seen += batch.num_steps
        # GAE with lambda = 1 gives G_t: the discounted rewards to the episode's end (plus
        # gamma V(final observation) after a time-limit truncation: that episode did not end).
        _, returns = compute_gae(rewards=self.learning_rewards(batch), values=batch.values,
                                 bootstrap_value=batch.bootstrap_value, terminated=batch.terminated,
                                 truncated=batch.truncated, valid=batch.valid, gamma=self.gamma, gae_lambda=1.0)
        keep = batch.valid & in_finished_episode(batch.terminated | batch.truncated)
        metrics = {"finished_step_fraction": float(keep.mean())}
        if keep.any():
            obs = torch.as_tensor(batch.obs[keep], device=self.device)
            actions = torch.as_tensor(batch.actions[keep], device=self.device)
            target = torch.as_tensor(returns[keep], device=self.device)
            with self.step.autocast():  # the forward pass and loss in algo.precision
                logp, entropy, values = self.model.evaluate_actions(obs, actions)
                advantages = target - values.detach()
                if self.normalize_advantages:
                    advantages = normalize(advantages)
                loss_policy = policy_gradient_loss(logp, advantages)
                loss_value = value_loss(values, target, None, None)
            self.step(loss_policy + self.value_coef * loss_value)  # backward, clip, Adam; NaN steps skipped
            metrics.update(loss_policy=loss_policy.item(), loss_value=loss_value.item(),
                           entropy=entropy.mean().item())
        # Observation statistics, policy version + 1 (the workers get the new weights), explained variance
        return {**metrics, **self.finish_update(batch, returns)}


def in_finished_episode(done: np.ndarray) -> np.ndarray:
    """[T, N]: True at and before the last episode end in each environment's column, where the
    rest of the episode, and so its return, is in the rollout."""
    T = done.shape[0]
    last_end = np.where(done.any(axis=0), T - 1 - np.argmax(done[::-1], axis=0), -1)
    return np.arange(T)[:, None] <= last_end[None, :]
