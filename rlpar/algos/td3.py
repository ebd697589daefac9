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

import torch

from rlpar.algos.sac import SAC
from rlpar.learning.optimization.optim import polyak


class TD3(SAC):
    gaussian_actor = False
    loss_names = ("loss_q", "td_error_mean", "q_mean", "loss_actor")
    # TD3 has no entropy term
    KEYWORDS_NOT_FORWARDED = ("alpha", "initial_alpha", "target_entropy")

    def __init__(
        self,
        *,
        exploration_noise: float = 0.1,
        target_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        policy_delay: int = 2,
        **sac_kwargs,
    ):
        """`sac_kwargs`: SAC's (lr, gamma, batch_size, replay_ratio, learning_starts, tau, replay, ...)."""
        self.exploration_noise, self.target_noise, self.target_noise_clip = (
            exploration_noise,
            target_noise,
            target_noise_clip,
        )
        super().__init__(policy_delay=policy_delay, alpha=0.0, **sac_kwargs)
        self.target_actor = copy.deepcopy(self.model.actor).requires_grad_(False)
        self.last_actor_stats = torch.zeros(1)

    def noise_scale(self):
        return self.exploration_noise

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
