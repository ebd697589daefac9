"""Advantage actor-critic, synchronous (A2C; Mnih et al. 2016, the batched variant of A3C).

One iteration: act with the current weights -> n-step (or GAE) advantages -> one gradient step
on the whole batch -> new weights. Runs on every sampler; `sync_mode=blocking` keeps it on-policy.
A recurrent policy (`model.recurrent`) takes the step on pieces of `sequence_length` steps of each
environment (whole rollouts by default), each unrolled from its stored state
(rlpar.learning.estimators.sequences).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlpar.algos.base import ActorCriticConfig, Algorithm, StepResult
from rlpar.learning.learner import Learner
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.learning.optimization.compiled import EagerStep, compile_setting, gradient_step
from rlpar.learning.optimization.optim import build_optimizer
from rlpar.learning.optimization.step import LearningRate
from rlpar.typed_config import choice, flag, integer, number, override

# What an update's gradient step takes from its inputs, per valid step.
LEARNING_ARRAYS = ("obs", "actions", "advantages", "returns")


@dataclass(frozen=True, kw_only=True)
class A2CConfig(ActorCriticConfig):
    """A2C's keys (conf/algo/a2c.yaml), besides every learner's."""

    lr: float = override(ActorCriticConfig, "lr", 7e-4)
    optimizer: str = choice("rmsprop", ("rmsprop", "adam"))
    rmsprop_alpha: float = number(0.99, low=0, high=1, high_open=True)
    optimizer_eps: float = number(1e-5, low=0, low_open=True)
    advantage: str = choice("nstep", ("nstep", "gae"))
    n_steps: int | None = integer(None, low=1, optional=True)  # None: the rollout
    gae_lambda: float = number(1.0, low=0, high=1)
    normalize_advantages: bool = flag(False)
    sequence_length: int | None = integer(None, low=1, optional=True)  # a recurrent policy's pieces (None: rollout)


class A2CLearner(Learner):
    """A2C's update: one gradient step of the actor-critic loss on a rollout's prepared
    advantages and returns."""

    def __init__(
        self,
        config: A2CConfig,
        *,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        batch_steps: int,
    ):
        """`compile`: the rollout's gradient step with torch.compile (whole with Adam, the loss
        alone with RMSprop), for every batch size (a rollout's valid steps vary)
        (rlpar.learning.optimization.compiled), used from gradient step `compile_switch` on (or `ready`: as
        soon as it is compiled). `sequence_length`: a recurrent policy's learning pieces, in
        steps (None: the rollout). `batch_steps`: the steps of one update's batch."""
        super().__init__(policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device)
        self.objective = ActorCriticLoss(
            gamma=config.gamma,
            advantage=config.advantage,
            n_steps=config.n_steps,
            gae_lambda=config.gae_lambda,
            value_coef=config.value_coef,
            entropy_coef=config.entropy_coef,
            normalize_advantages=config.normalize_advantages,
        )
        self.optimizer_settings: dict[str, Any] = dict(
            optimizer=config.optimizer,
            lr=config.lr,
            optimizer_eps=config.optimizer_eps,
            rmsprop_alpha=config.rmsprop_alpha,
        )
        self.set_optimizer(
            build_optimizer(self.parameters, **self.optimizer_settings),
            max_grad_norm=config.max_grad_norm,
            max_consecutive_nonfinite=config.max_consecutive_nonfinite,
            precision=config.precision,
        )
        self.lr = LearningRate(config.lr, config.anneal_lr, config.min_lr_fraction)
        self.compiled = compile_setting(
            config.compile,
            expected_gradient_steps=total_steps // max(batch_steps, 1),
            precision=config.precision,
            recurrent=self.model.recurrent,
            images=policy_spec.has_images,
        )
        self.sequence_length = config.sequence_length
        self.gradient_step = gradient_step(
            self.rollout_loss,
            model=self.model,
            guard=self.step,
            compiled=self.compiled,
            dynamic=True,
            switch=config.compile_switch,
        )

    def learn(self, inputs: dict) -> dict:
        """The gradient step on the valid steps of `inputs` (see `step_on_valid_steps`)."""
        parts = self.step_on_valid_steps(inputs, LEARNING_ARRAYS, sequence_length=self.sequence_length)
        return {**self.loss_stats(parts), "gradient_steps": 1}

    def on_joining_peers(self) -> None:
        """Eager steps, the loss included (with RMSprop a compiled loss would trace the
        all-reduce that normalises advantages)."""
        self.gradient_step = EagerStep(self.rollout_loss, guard=self.step)

    def rollout_loss(self, obs, actions, advantages, returns, initial_state=None, valid=None):
        """The loss of one rollout's valid steps and its parts (what algo.compile compiles).
        Advantages are normalised over every learner's steps (`self.peers`), as one learner would.
        A recurrent policy's rollout is pieces ([L, P] arrays, `initial_state` and `valid`)."""
        return self.objective(
            self.model,
            obs=obs,
            actions=actions,
            advantages=advantages,
            returns=returns,
            initial_state=initial_state,
            valid=valid,
            normalized=self.peers.normalize,
        )

    def loss_stats(self, parts) -> dict:
        """The loss's parts ([policy, value, entropy]) and the policy's spread, as logged."""
        loss_policy, loss_value, loss_entropy = parts.tolist()
        out = {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": loss_entropy,
            **self.step.metrics(),
        }
        if not self.model.discrete:
            out["policy_std"] = float(self.model.log_std.detach().exp().mean())
        return out


class A2C(Algorithm):
    """One iteration: a rollout, its advantages and returns (`learning_inputs`, once), the
    learner's gradient step (by every learner, `self.peers`), the update's end."""

    Config = A2CConfig
    learner_class: type[A2CLearner] = A2CLearner
    learner: A2CLearner
    data_parallel = True
    recurrent_policies = True

    def learner_options(self, config: A2CConfig, sampler) -> dict:
        """Its learner is told the size of a batch (the sampler's rollout_length x num_envs)."""
        return {"batch_steps": sampler.rollout_length * sampler.num_envs}

    def training_step(self) -> StepResult:
        return self.sample_and_update()

    def learning_inputs(self, batch) -> dict:
        """The advantages and returns of the whole batch, time-major [T, E], with the learning
        rate: done once (by the learner that samples, in a learner group), as they advance running statistics."""
        lr = self.count_steps(batch)
        advantages, returns = self.learner.objective.targets(batch, self.learning_rewards(batch))
        return {
            "obs": batch.obs,
            "actions": batch.actions,
            "advantages": advantages,
            "returns": returns,
            "valid": batch.valid,
            "states": batch.states,
            "lr": lr,
        }
