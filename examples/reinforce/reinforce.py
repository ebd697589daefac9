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

from dataclasses import dataclass

import numpy as np
import torch

from rlpar.algos.base import Algorithm, AlgorithmConfig, StepResult
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.optimization.optim import adam
from rlpar.learning.losses.ppo_loss import normalize, policy_gradient_loss, value_loss
from rlpar.typed_config import choice, flag, number


@dataclass(frozen=True, kw_only=True)
class ReinforceConfig(AlgorithmConfig):
    """The keys of conf/algo/reinforce.yaml, with their types, defaults and ranges: validation
    refuses a value out of range, or a key not here, before anything starts. AlgorithmConfig adds
    gamma and the rewards' scale, clip and normalisation (what `learning_rewards` applies)."""

    lr: float = number(1e-2, low=0, low_open=True)
    value_coef: float = number(0.5, low=0)
    max_grad_norm: float = number(0.5, low=0, low_open=True)
    normalize_advantages: bool = flag(True)
    precision: str = choice("fp32", ("fp32", "bf16", "fp16"))


class Reinforce(Algorithm):
    Config = ReinforceConfig  # what the builder makes from the algo node and passes first

    def __init__(self, config: ReinforceConfig, **built):  # built: sampler, policy_spec, total_steps, seed, device
        super().__init__(config, **built)
        self.gamma, self.value_coef, self.normalize_advantages = config.gamma, config.value_coef, config.normalize_advantages
        self.set_optimizer(adam(self.parameters, lr=config.lr), max_grad_norm=config.max_grad_norm,
                           max_consecutive_nonfinite=20,
                           precision=config.precision)  # fp32, bf16 or fp16 (torch.autocast; fp16 with a loss scaler)

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
