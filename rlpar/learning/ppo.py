"""Proximal Policy Optimization (clipped objective, GAE, minibatch epochs)."""

from __future__ import annotations

import math

import numpy as np
import torch

from rlpar.learning.errors import NonFiniteLossError
from rlpar.learning.gae import compute_gae
from rlpar.learning.optim import LeanAdam, clip_grad_norm
from rlpar.learning.ppo_loss import approx_kl, clip_fraction, clipped_policy_loss, normalize, value_loss
from rlpar.models.spec import PolicySpec
from rlpar.sampling.batch import Batch, raw_obs_moments


class PPOLearner:
    def __init__(
        self,
        *,
        policy_spec: PolicySpec,
        total_steps: int,
        seed: int,
        lr: float = 3e-4,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip: float = 0.2,
        value_coef: float = 0.5,
        entropy_coef: float = 0.01,
        max_grad_norm: float = 0.5,
        epochs: int = 10,
        minibatch_size: int = 64,
        normalize_advantages: bool = True,
        value_clip: float | None = None,
        anneal_lr: bool = False,
        min_lr_fraction: float = 0.0,
        target_kl: float | None = None,
        reward_scale: float = 1.0,
        max_consecutive_nonfinite: int = 20,
        device: str = "cpu",
    ):
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.model = policy_spec.build().to(self.device)
        self.parameters = list(self.model.parameters())
        self.optimizer = LeanAdam(self.parameters, lr=lr, eps=1e-5)
        self.base_lr = lr
        self.total_steps = total_steps
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.clip, self.value_clip = clip, value_clip
        self.value_coef, self.entropy_coef = value_coef, entropy_coef
        self.max_grad_norm = max_grad_norm
        self.epochs, self.minibatch_size = epochs, minibatch_size
        self.normalize_advantages = normalize_advantages
        self.anneal_lr, self.min_lr_fraction = anneal_lr, min_lr_fraction
        self.target_kl = target_kl
        self.reward_scale = reward_scale
        self.rng = np.random.default_rng([seed, 2])
        self.max_consecutive_nonfinite = max_consecutive_nonfinite
        self.nonfinite_updates = 0
        self.consecutive_nonfinite = 0
        self.version = 0
        self.steps_seen = 0

    # -- weights ----------------------------------------------------------------------------
    def get_weights(self) -> dict:
        """CPU numpy copies: cheap to send to any process and safe to hold across updates."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    # -- update -----------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict:
        self.steps_seen += batch.num_steps
        lr = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        advantages, returns = compute_gae(
            rewards=batch.rewards * self.reward_scale,
            values=batch.values,
            bootstrap_value=batch.bootstrap_value,
            terminated=batch.terminated,
            truncated=batch.truncated,
            valid=batch.valid,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
        )
        keep = batch.valid.reshape(-1)
        to_tensor = lambda a: torch.as_tensor(a.reshape((-1,) + a.shape[2:])[keep], device=self.device)
        data = {
            "obs": to_tensor(batch.obs),
            "actions": to_tensor(batch.actions),
            "old_logp": to_tensor(batch.logp),
            "old_values": to_tensor(batch.values),
            "advantages": to_tensor(advantages),
            "returns": to_tensor(returns),
        }
        stats = self._optimise(data)
        moments = raw_obs_moments(batch)
        if moments is not None:
            self.model.obs_normalizer.update(*moments)
        self.version += 1
        explained = _explained_variance(batch.values.reshape(-1)[keep], returns.reshape(-1)[keep])
        return {**stats, "lr": lr, "explained_variance": explained, "policy_version": self.version}

    def _learning_rate(self) -> float:
        if not self.anneal_lr:
            return self.base_lr
        progress = min(self.steps_seen / max(self.total_steps, 1), 1.0)
        return self.base_lr * max(1.0 - progress, self.min_lr_fraction)

    def _optimise(self, data: dict) -> dict:
        """Minibatch epochs. Per-op overhead dominates small MLPs, so each epoch shuffles once
        and slices contiguous views, and diagnostics (KL, clip fraction, entropy) are computed
        once per epoch or update from detached log-probabilities, not in every step."""
        size = len(data["obs"])
        mb = min(self.minibatch_size, size)
        losses, epoch_stats = [], []
        for _ in range(self.epochs):
            order = torch.from_numpy(self.rng.permutation(size))
            shuffled = {k: v[order] for k, v in data.items()}
            new_logps, old_logps = [], []
            for start in range(0, size - mb + 1, mb):
                part = {k: v[start : start + mb] for k, v in shuffled.items()}
                p_loss, v_loss, logp = self._gradient_step(**part)
                losses.append(torch.stack((p_loss, v_loss)))
                new_logps.append(logp)
                old_logps.append(part["old_logp"])
            new_logp, old_logp = torch.cat(new_logps), torch.cat(old_logps)
            epoch_stats.append(torch.stack((approx_kl(new_logp, old_logp), clip_fraction(new_logp, old_logp, self.clip))))
            if self.target_kl is not None and epoch_stats[-1][0].item() > self.target_kl:
                break
        loss_policy, loss_value = torch.stack(losses).mean(0).tolist()
        kl, clip_frac = torch.stack(epoch_stats).mean(0).tolist()
        with torch.no_grad():
            _, entropy, _ = self.model.evaluate_actions(data["obs"], data["actions"])
        out = {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": entropy.mean().item(),
            "approx_kl": kl,
            "clip_fraction": clip_frac,
            "epochs": len(epoch_stats),
            "gradient_steps": len(losses),
            "nonfinite_updates": self.nonfinite_updates,
        }
        if not self.model.discrete:
            out["policy_std"] = float(self.model.log_std.detach().exp().mean())
        return out

    def _gradient_step(self, obs, actions, old_logp, old_values, advantages, returns):
        with_entropy = self.entropy_coef != 0
        logp, entropy, values = self.model.evaluate_actions(obs, actions, with_entropy=with_entropy)
        if self.normalize_advantages:
            advantages = normalize(advantages)
        p_loss = clipped_policy_loss(logp, old_logp, advantages, self.clip)
        v_loss = value_loss(values, returns, old_values, self.value_clip)
        loss = p_loss + self.value_coef * v_loss
        if with_entropy:
            loss = loss - self.entropy_coef * entropy.mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = clip_grad_norm(self.parameters, self.max_grad_norm)
        if math.isfinite(grad_norm.item()):
            self.optimizer.step()
            self.consecutive_nonfinite = 0
        else:  # a NaN/inf loss or gradient: skip this update rather than poison the weights
            self.nonfinite_updates += 1
            self.consecutive_nonfinite += 1
            if self.consecutive_nonfinite > self.max_consecutive_nonfinite:
                raise NonFiniteLossError(
                    f"{self.consecutive_nonfinite} gradient steps in a row had a non-finite loss or gradient "
                    f"({self.nonfinite_updates} in all); stopping. Lower algo.lr or check the environment's rewards."
                )
        return p_loss.detach(), v_loss.detach(), logp.detach()

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "steps_seen": self.steps_seen,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.steps_seen = int(state["steps_seen"])
        self.rng.bit_generator.state = state["rng"]


def _explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    var = np.var(target)
    return float("nan") if var == 0 else float(1.0 - np.var(target - predicted) / var)
