"""SAC (Haarnoja et al. 2018), with automatic entropy tuning, for continuous actions.

One iteration: act with the newest published actor (squashed-Gaussian draws; uniform random
actions until `learning_starts` env steps) -> the rollout's n-step transitions into the replay
the learner owns (rlpar.algos.replay_learner) -> `replay_ratio` gradient steps per env step,
each on a minibatch from the replay:
  1. critics: every Q_k towards r + γ^n (min_k Q'_k(s', a') − α log π(a'|s')), a' ~ π(s'), the
     Q'_k being Polyak-averaged copies (clipped double Q over `model.critics`);
  2. actor, every `policy_delay` steps: minimise α log π(a|s) − min_k Q_k(s, a), a ~ π(s)
     (reparameterised; the critics' weights held), and, with `alpha: auto`, α towards
     the entropy `target_entropy` (−dim(A) unless set);
  3. targets: Q' ← (1 − tau) Q' + tau Q.
-> weights (the actor's only) published to the workers every `weight_sync_interval` updates.

The critics and the actor learn with their own Adam, as in the reference implementations, each
step one graph with `algo.compile` (rlpar.learning.optimization.compiled). Runs on every sampler, the same on
each; the Ape-X-style SAC over replay shards is `algo=apex_sac` (rlpar.algos.apex_sac).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlpar.algos.replay_learner import ReplayLearner, ReplayLearnerConfig, as_tensor
from rlpar.learning.learner import Learner
from rlpar.learning.optimization.compiled import compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam, load_optimizer_state, optimizer_state, polyak
from rlpar.learning.optimization.step import GuardedStep, LearningRate
from rlpar.typed_config import integer, number, override


@dataclass(frozen=True, kw_only=True)
class SACConfig(ReplayLearnerConfig):
    """SAC's keys (conf/algo/sac.yaml), besides a replay learner's."""

    batch_size: int = override(ReplayLearnerConfig, "batch_size", 256)
    replay_ratio: float = override(ReplayLearnerConfig, "replay_ratio", 1.0)
    learning_starts: int = override(ReplayLearnerConfig, "learning_starts", 5000)
    max_grad_norm: float = override(ReplayLearnerConfig, "max_grad_norm", float("inf"))  # no clipping
    tau: float = number(0.005, low=0, high=1, low_open=True)  # Polyak averaging of the targets
    policy_delay: int = integer(1, low=1)  # critic steps per actor step
    alpha: float | str = number("auto", low=0, low_open=True, also=("auto",))  # auto: learned from initial_alpha
    initial_alpha: float = number(1.0, low=0, low_open=True)
    target_entropy: float | str = number("auto", also=("auto",))  # auto: -(action dimensions)


class SACLearner(Learner):
    """SAC's update: critic steps, delayed actor (and α) steps and Polyak-averaged target
    critics, on minibatches its algorithm drew from the replay."""

    input_layout = "rows"

    def __init__(self, config: SACConfig, *, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        """`alpha`: the entropy coefficient α, auto (learned, from `initial_alpha`) or fixed;
        `max_grad_norm`: .inf, no clipping (as the reference implementations). `compile_switch`:
        each step's gradient step from which its compiled graph is used (rlpar.learning.optimization.compiled)."""
        super().__init__(policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device)
        self.batch_size = config.batch_size
        self.tau, self.policy_delay = config.tau, config.policy_delay
        self.gradient_steps = 0
        self.learn_alpha = config.alpha == "auto"
        if self.model.temperature is not None:
            with torch.no_grad():
                self.model.temperature.log_alpha.fill_(
                    math.log(config.initial_alpha if self.learn_alpha else float(config.alpha))
                )
        self.target_entropy = (
            -float(policy_spec.action.size) if config.target_entropy == "auto" else float(config.target_entropy)
        )
        self.target_critic = copy.deepcopy(self.model.critic).requires_grad_(False)
        self.actor_side = nn.ModuleDict(
            {"actor": self.model.actor, **({"temperature": self.model.temperature} if self.learn_alpha else {})}
        )
        guard: dict[str, Any] = dict(
            max_grad_norm=config.max_grad_norm,
            max_consecutive_nonfinite=config.max_consecutive_nonfinite,
            precision=config.precision,
            device_type=self.device.type,
        )
        critic_params = list(self.model.critic.parameters())
        self.optimizer = adam(critic_params, lr=config.lr)
        self.step = GuardedStep(parameters=critic_params, optimizer=self.optimizer, **guard)
        actor_params: list[torch.Tensor] = list(self.actor_side.parameters())
        self.actor_optimizer = adam(actor_params, lr=config.lr)
        self.actor_guard = GuardedStep(parameters=actor_params, optimizer=self.actor_optimizer, **guard)
        self.lr = LearningRate(config.lr, config.anneal_lr, config.min_lr_fraction)
        self.compiled = compile_setting(
            config.compile, expected_gradient_steps=int(config.replay_ratio * total_steps), precision=config.precision
        )
        self.critic_step = gradient_step(
            self.critic_loss,
            model=self.model.critic,
            guard=self.step,
            compiled=self.compiled,
            switch=config.compile_switch,
        )
        self.actor_step = gradient_step(
            self.actor_loss,
            model=self.actor_side,
            guard=self.actor_guard,
            compiled=self.compiled,
            switch=config.compile_switch,
        )
        self.last_actor_stats = torch.zeros(3)  # the latest actor step's (loss, α, entropy), for delayed steps

    def alpha(self) -> torch.Tensor:
        return self.model.temperature().detach()

    def critic_loss(self, obs, actions, rewards, next_obs, discounts, weights):
        """Every critic's weighted squared error to the soft clipped-double-Q target (halved, as
        SB3's); its |TD errors| (the critics' mean) and mean Q."""
        with torch.no_grad():
            next_actions, next_logp = self.model.actor.sample(next_obs)
            next_q = self.target_critic(next_obs, next_actions).min(0).values - self.alpha() * next_logp
            targets = rewards + discounts * next_q
        q = self.model.critic(obs, actions)
        td_errors = targets - q
        loss = 0.5 * (weights * td_errors.square()).mean(1).sum()
        return loss, td_errors.abs().mean(0), q.mean()

    def actor_loss(self, obs):
        """The actor's loss, plus α's (automatic tuning); the actor's loss, α and the entropy."""
        actions, logp = self.model.actor.sample(obs)
        q = self.model.critic(obs, actions, detached=True).min(0).values
        alpha = self.alpha()
        actor_loss = (alpha * logp - q).mean()
        loss = actor_loss
        if self.learn_alpha:
            loss = loss - (self.model.temperature.log_alpha * (logp.detach() + self.target_entropy)).mean()
        return loss, actor_loss, alpha, -logp.detach().mean()

    def learn(self, inputs: dict) -> dict:
        """A critic step on each minibatch; an actor step every `policy_delay`-th; the targets
        refreshed as each step makes them due. Returns every row's |TD error| and each step's
        diagnostics (its algorithm's loss_names)."""
        td_errors, losses = [], []
        for transitions, weights in zip(inputs["minibatches"], inputs["weights"]):
            data = {k: as_tensor(v, self.device) for k, v in transitions.items()}
            loss_q, td, q_mean = self.critic_step(**data, weights=as_tensor(weights, self.device))
            self.gradient_steps += 1
            if self.gradient_steps % self.policy_delay == 0:
                self.last_actor_stats = torch.stack(self.actor_step(obs=data["obs"])[1:])
            self.refresh_targets()
            td_errors.append(td)
            losses.append(torch.cat([torch.stack([loss_q, td.mean(), q_mean]), self.last_actor_stats]))
        return {"td_errors": torch.stack(td_errors).cpu().numpy(), "losses": torch.stack(losses)}

    def refresh_targets(self) -> None:
        """Polyak averaging after every critic step."""
        polyak(self.target_critic, self.model.critic, self.tau)

    def set_learning_rate(self, steps_seen: int) -> float:
        lr = super().set_learning_rate(steps_seen)
        self.actor_optimizer.param_groups[0]["lr"] = lr
        return lr

    def settle_steps(self) -> None:
        """Count the non-finite steps a compiled step skipped (CompiledStep.settle)."""
        self.critic_step.settle()
        self.actor_step.settle()

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "actor_optimizer": optimizer_state(self.actor_optimizer),
            "target_critic": self.target_critic.state_dict(),
            "last_actor_stats": self.last_actor_stats,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        load_optimizer_state(self.actor_optimizer, state["actor_optimizer"])
        self.target_critic.load_state_dict(state["target_critic"])
        self.last_actor_stats = state["last_actor_stats"]


class SAC(ReplayLearner):
    """One iteration: act with the newest actor, the rollout into the replay, the replay
    ratio's minibatches learned by its learner (rlpar.algos.replay_learner), weights out."""

    Config = SACConfig
    learner_class: type[SACLearner] = SACLearner
    learner: SACLearner
    model_kind = "actor_q"
    action_spaces = ("Box",)
    gaussian_actor = True  # the actor_q model's actor it learns (model.gaussian)
    loss_names: tuple[str, ...] = ("loss_q", "td_error_mean", "q_mean", "loss_actor", "alpha", "entropy")
    precisions = ("fp32", "bf16")

    # -- acting -----------------------------------------------------------------------------
    def get_weights(self) -> dict:
        """The actor's weights (workers need nothing else), how much to explore, and whether to
        act uniformly at random (before `learning_starts`)."""
        weights = {k: v.detach().cpu().numpy().copy() for k, v in self.model.actor.state_dict(prefix="actor.").items()}
        return {**weights, "noise_scale": self.noise_scale(), "random_actions": self.steps_seen < self.learning_starts}

    def noise_scale(self):
        """SAC explores with its own Gaussian: scale 1."""
        return 1.0

    def exploration_metrics(self) -> dict:
        return {"random_actions": float(self.steps_seen < self.learning_starts)}
