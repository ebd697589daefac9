"""Advantage actor-critic, synchronous (A2C; Mnih et al. 2016, the batched variant of A3C).

One iteration: act with the current weights -> n-step (or GAE) advantages -> one gradient step
on the whole batch -> new weights. Runs on every sampler; `sync_mode=blocking` keeps it on-policy.
"""

from __future__ import annotations

import torch

from rlpar.algos.base import Algorithm, LearningRate, StepResult, advantage_inputs, valid_step_tensors
from rlpar.learning.gae import compute_gae
from rlpar.learning.nstep import compute_nstep_returns
from rlpar.learning.optim import LeanAdam
from rlpar.learning.ppo_loss import normalize, policy_gradient_loss, value_loss

ADVANTAGES = ("nstep", "gae")
OPTIMIZERS = ("rmsprop", "adam")


class A2C(Algorithm):
    def __init__(
        self,
        *,
        sampler,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        lr: float = 7e-4,
        optimizer: str = "rmsprop",
        rmsprop_alpha: float = 0.99,
        optimizer_eps: float = 1e-5,
        anneal_lr: bool = False,
        min_lr_fraction: float = 0.0,
        gamma: float = 0.99,
        advantage: str = "nstep",
        n_steps: int | None = None,
        gae_lambda: float = 1.0,
        value_coef: float = 0.5,
        entropy_coef: float = 0.01,
        max_grad_norm: float = 0.5,
        normalize_advantages: bool = False,
        reward_scale: float = 1.0,
        normalize_rewards: bool = False,
        max_consecutive_nonfinite: int = 20,
    ):
        if advantage not in ADVANTAGES:
            raise ValueError(f"advantage must be one of {', '.join(ADVANTAGES)}, got {advantage!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
        super().__init__(sampler=sampler, policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device,
                         gamma=gamma, reward_scale=reward_scale, normalize_rewards=normalize_rewards)
        if optimizer == "rmsprop":
            # torch.optim: constructing it imports torch._dynamo (0.8-0.9 s of start-up here), and
            # its step costs ~80 us against LeanAdam's ~17 us (an A2C update: ~0.7 ms against ~0.6).
            chosen = torch.optim.RMSprop(self.parameters, lr=lr, alpha=rmsprop_alpha, eps=optimizer_eps)
        else:
            chosen = LeanAdam(self.parameters, lr=lr, eps=optimizer_eps)
        self.set_optimizer(chosen, max_grad_norm=max_grad_norm, max_consecutive_nonfinite=max_consecutive_nonfinite)
        self.lr = LearningRate(lr, anneal_lr, min_lr_fraction)
        self.gamma, self.advantage, self.n_steps, self.gae_lambda = gamma, advantage, n_steps, gae_lambda
        self.value_coef, self.entropy_coef = value_coef, entropy_coef
        self.normalize_advantages = normalize_advantages

    def training_step(self) -> StepResult:
        return self.sample_and_update()

    def update(self, batch) -> dict:
        """Learn from one on-policy batch; returns the update's diagnostics."""
        self.steps_seen += batch.num_steps
        lr = self.lr.apply(self.optimizer, steps_seen=self.steps_seen, total_steps=self.total_steps)
        advantages, returns = self.estimate(batch)
        data = valid_step_tensors({"obs": batch.obs, "actions": batch.actions, "advantages": advantages,
                                   "returns": returns}, batch.valid, self.device)
        stats = self.gradient_step(**data)
        return {**stats, "lr": lr, **self.finish_update(batch, returns)}

    def estimate(self, batch):
        """Advantages and value targets: n-step returns (n_steps null: the whole rollout, the
        classic A2C return), or GAE(gamma, gae_lambda)."""
        inputs = advantage_inputs(batch, self.learning_rewards(batch))
        if self.advantage == "gae":
            return compute_gae(**inputs, gamma=self.gamma, gae_lambda=self.gae_lambda)
        n_steps = self.n_steps or batch.rewards.shape[0]
        return compute_nstep_returns(**inputs, gamma=self.gamma, n_steps=n_steps)

    def gradient_step(self, obs, actions, advantages, returns) -> dict:
        """One step on the whole batch: policy gradient + value regression - entropy bonus."""
        logp, entropy, values = self.model.evaluate_actions(obs, actions)
        if self.normalize_advantages:
            advantages = normalize(advantages)
        p_loss = policy_gradient_loss(logp, advantages)
        v_loss = value_loss(values, returns, None, None)
        entropy = entropy.mean()
        loss = p_loss + self.value_coef * v_loss - self.entropy_coef * entropy
        self.step(loss)
        loss_policy, loss_value, loss_entropy = torch.stack((p_loss, v_loss, entropy)).detach().tolist()
        out = {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": loss_entropy,
            "gradient_steps": 1,
            "nonfinite_updates": self.step.nonfinite_updates,
        }
        if not self.model.discrete:
            out["policy_std"] = float(self.model.log_std.detach().exp().mean())
        return out
