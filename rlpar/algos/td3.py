"""TD3 (Fujimoto et al. 2018): a deterministic actor with twin critics, target policy smoothing
and delayed actor updates, for continuous actions. SAC's learner (rlpar.algos.sac) with these
parts in place of the entropy terms.

One iteration: act with the newest published actor plus Gaussian noise of standard deviation
`exploration_noise` (uniform random actions until `learning_starts` env steps) -> the rollout's
n-step transitions into the learner's replay -> `replay_ratio` gradient steps per env step:
  1. critics towards r + γ^n min_k Q'_k(s', clip(μ'(s') + clip(ε, −c, c), −1, 1)),
     ε ~ N(0, `target_noise`²), c = `target_noise_clip` (target policy smoothing);
  2. every `policy_delay` steps: the actor to maximise Q_1(s, μ(s)) (the critics' weights
     held), and the targets μ', Q' ← (1 − tau) · + tau · (delayed updates).
-> weights (the actor's) published to the workers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from rlpar.algos.sac import SAC, SACConfig, SACLearner
from rlpar.learning.optimization.optim import polyak
from rlpar.typed_config import number, override


@dataclass(frozen=True, kw_only=True)
class TD3Config(SACConfig):
    """TD3's keys (conf/algo/td3.yaml): SAC's, with exploration and target-smoothing noise in place
    of the entropy terms (which it fixes: no entropy term)."""

    policy_delay: int = override(SACConfig, "policy_delay", 2)
    exploration_noise: float = number(0.1, low=0)  # the acting Gaussian's standard deviation
    target_noise: float = number(0.2, low=0)  # target policy smoothing's
    target_noise_clip: float = number(0.5, low=0)
    alpha: float | str = override(SACConfig, "alpha", 0.0, fixed=True)
    initial_alpha: float = override(SACConfig, "initial_alpha", 1.0, fixed=True)
    target_entropy: float | str = override(SACConfig, "target_entropy", "auto", fixed=True)


class TD3Learner(SACLearner):
    """TD3's update: SAC's steps with a deterministic actor, target policy smoothing, and the
    targets refreshed with the delayed actor steps."""

    def __init__(self, config: TD3Config, **built):
        """`built`: policy_spec, total_steps, seed, device (as SACLearner's)."""
        self.target_noise, self.target_noise_clip = config.target_noise, config.target_noise_clip
        super().__init__(config, **built)
        self.target_actor = copy.deepcopy(self.model.actor).requires_grad_(False)
        self.last_actor_stats = torch.zeros(1)

    def critic_loss(self, obs, actions, rewards, next_obs, discounts, weights):
        with torch.no_grad():
            smoothing = (torch.randn_like(actions) * self.target_noise).clamp(
                -self.target_noise_clip, self.target_noise_clip
            )
            next_actions = (self.target_actor.deterministic(next_obs) + smoothing).clamp(-1.0, 1.0)
            targets = rewards + discounts * self.target_critic(next_obs, next_actions).min(0).values
        q = self.model.critic(obs, actions)
        td_errors = targets - q
        loss = 0.5 * (weights * td_errors.square()).mean(1).sum()
        return loss, td_errors.abs().mean(0), q.mean()

    def actor_loss(self, obs):
        q = self.model.critic(obs, self.model.actor.deterministic(obs), detached=True)[0]
        loss = -q.mean()
        return loss, loss

    def refresh_targets(self) -> None:
        """Delayed: with the actor, every `policy_delay` critic steps."""
        if self.gradient_steps % self.policy_delay == 0:
            polyak(self.target_critic, self.model.critic, self.tau)
            polyak(self.target_actor, self.model.actor, self.tau)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "target_actor": self.target_actor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.target_actor.load_state_dict(state["target_actor"])


class TD3(SAC):
    gaussian_actor = False
    loss_names = ("loss_q", "td_error_mean", "q_mean", "loss_actor")
    Config = TD3Config
    learner_class = TD3Learner

    def __init__(self, config: TD3Config, **built):
        """`built`: what the builder passes every algorithm (sampler, policy_spec, total_steps, seed, device)."""
        self.exploration_noise = config.exploration_noise
        super().__init__(config, **built)

    def noise_scale(self):
        return self.exploration_noise
