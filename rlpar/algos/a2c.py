"""Advantage actor-critic, synchronous (A2C; Mnih et al. 2016, the batched variant of A3C).

One iteration: act with the current weights -> n-step (or GAE) advantages -> one gradient step
on the whole batch -> new weights. Runs on every sampler; `sync_mode=blocking` keeps it on-policy.
A recurrent policy (`model.recurrent`) takes the step on pieces of `sequence_length` steps of each
environment (whole rollouts by default), each unrolled from its stored state
(rlpar.learning.estimators.sequences).
"""

from __future__ import annotations

from typing import Any

from rlpar.algos.base import Algorithm, StepResult
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.learning.optimization.compiled import COMPILE_SWITCH_STEP, EagerStep, compile_setting, gradient_step
from rlpar.learning.optimization.optim import build_optimizer
from rlpar.learning.optimization.step import LearningRate

# What an update's gradient step takes from its inputs, per valid step.
LEARNING_ARRAYS = ("obs", "actions", "advantages", "returns")


class A2C(Algorithm):
    data_parallel = True
    recurrent_policies = True

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
        reward_clip: float | None = None,
        normalize_rewards: bool = False,
        max_consecutive_nonfinite: int = 20,
        sequence_length: int | None = None,
        compile: str | bool = "auto",
        compile_switch: int | str = COMPILE_SWITCH_STEP,
        precision: str = "fp32",
    ):
        """`compile`: the rollout's gradient step with torch.compile (whole with Adam, the loss
        alone with RMSprop), for every batch size (a rollout's valid steps vary)
        (rlpar.learning.optimization.compiled), used from gradient step `compile_switch` on (or `ready`: as
        soon as it is compiled). `sequence_length`: a recurrent policy's learning pieces, in
        steps (None: the rollout)."""
        super().__init__(
            sampler=sampler,
            policy_spec=policy_spec,
            total_steps=total_steps,
            seed=seed,
            device=device,
            gamma=gamma,
            reward_scale=reward_scale,
            normalize_rewards=normalize_rewards,
            reward_clip=reward_clip,
        )
        self.objective = ActorCriticLoss(
            gamma=gamma,
            advantage=advantage,
            n_steps=n_steps,
            gae_lambda=gae_lambda,
            value_coef=value_coef,
            entropy_coef=entropy_coef,
            normalize_advantages=normalize_advantages,
        )
        self.optimizer_settings: dict[str, Any] = dict(
            optimizer=optimizer, lr=lr, optimizer_eps=optimizer_eps, rmsprop_alpha=rmsprop_alpha
        )
        self.set_optimizer(
            build_optimizer(self.parameters, **self.optimizer_settings),
            max_grad_norm=max_grad_norm,
            max_consecutive_nonfinite=max_consecutive_nonfinite,
            precision=precision,
        )
        self.lr = LearningRate(lr, anneal_lr, min_lr_fraction)
        rollout_steps = max(sampler.rollout_length * sampler.num_envs, 1)
        self.compiled = compile_setting(
            compile,
            expected_gradient_steps=total_steps // rollout_steps,
            precision=precision,
            recurrent=self.model.recurrent,
            images=policy_spec.has_images,
        )
        self.sequence_length = sequence_length
        self.gradient_step = gradient_step(
            self.rollout_loss,
            model=self.model,
            guard=self.step,
            compiled=self.compiled,
            dynamic=True,
            switch=compile_switch,
        )

    def training_step(self) -> StepResult:
        return self.sample_and_update()

    def learning_inputs(self, batch) -> dict:
        """The advantages and returns of the whole batch, time-major [T, E], with the learning
        rate: done once (by the learner that samples, in a learner group), as they advance running statistics."""
        lr = self.count_steps(batch)
        advantages, returns = self.objective.targets(batch, self.learning_rewards(batch))
        return {
            "obs": batch.obs,
            "actions": batch.actions,
            "advantages": advantages,
            "returns": returns,
            "valid": batch.valid,
            "states": batch.states,
            "lr": lr,
        }

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
