"""IMPALA (Espeholt et al. 2018): actors sample on with stale weights; V-trace corrects for it.

One iteration: take the rollouts that have arrived (at least `batches_per_update`) -> evaluate
them with the learner's current policy and values -> V-trace targets and policy-gradient
advantages, bootstrapped from the learner's own value of each rollout's last observation -> one
gradient step -> new weights, which returning actors pick up at once. Actors never wait for the
learner (`sync_mode` non_blocking by default); the lag between the policy that acted and the one
that learns is reported every iteration and, unlike PPO's, not capped (`max_policy_lag` null).
In `parallel=local` it is synchronous, with lag 0.

A recurrent policy (`model.recurrent`) learns over whole rollouts (Sample Factory's recurrence
equal to the rollout): the targets and the gradient step both unroll the model over the rollout
from the state stored at its start, with the resets at episode ends inside it.
"""

from __future__ import annotations

from typing import Any

import torch

from rlpar.algos.base import Algorithm, StepResult
from rlpar.learning.estimators.batch_tensors import vtrace_inputs
from rlpar.learning.estimators.sequences import evaluate_steps, valid_steps
from rlpar.learning.estimators.vtrace import compute_vtrace
from rlpar.learning.losses.ppo_loss import policy_gradient_loss, value_loss
from rlpar.learning.optimization.compiled import COMPILE_SWITCH_STEP, compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam
from rlpar.learning.optimization.step import LearningRate

# What an update's gradient step takes from its inputs, per valid step.
LEARNING_ARRAYS = ("obs", "actions", "pg_advantages", "returns")  # returns: V-trace's targets vs


class IMPALA(Algorithm):
    sync_mode = "non_blocking"
    max_policy_lag = None
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
        lr: float = 5e-4,
        anneal_lr: bool = False,
        min_lr_fraction: float = 0.0,
        gamma: float = 0.99,
        vtrace_lambda: float = 1.0,
        clip_rho_threshold: float = 1.0,
        clip_c_threshold: float = 1.0,
        value_coef: float = 0.5,
        entropy_coef: float = 0.01,
        max_grad_norm: float = 40.0,
        batches_per_update: int = 1,
        reward_scale: float = 1.0,
        reward_clip: float | None = None,
        normalize_rewards: bool = False,
        max_consecutive_nonfinite: int = 20,
        compile: str | bool = "auto",
        compile_switch: int | str = COMPILE_SWITCH_STEP,
        precision: str = "fp32",
    ):
        """`compile`: the whole gradient step with torch.compile, for every batch size (the
        valid steps of a batch vary) (rlpar.learning.optimization.compiled), used from gradient step
        `compile_switch` on (or `ready`: as soon as it is compiled)."""
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
        self.set_optimizer(
            adam(self.parameters, lr=lr, eps=1e-5),
            max_grad_norm=max_grad_norm,
            max_consecutive_nonfinite=max_consecutive_nonfinite,
            precision=precision,
        )
        self.lr = LearningRate(lr, anneal_lr, min_lr_fraction)
        self.vtrace: dict[str, Any] = dict(
            gamma=gamma,
            vtrace_lambda=vtrace_lambda,
            clip_rho_threshold=clip_rho_threshold,
            clip_c_threshold=clip_c_threshold,
        )
        self.value_coef, self.entropy_coef = value_coef, entropy_coef
        self.batches_per_update = batches_per_update
        batch_steps = max(sampler.rollout_length * sampler.worker_envs * batches_per_update, 1)
        self.compiled = compile_setting(
            compile,
            expected_gradient_steps=total_steps // batch_steps,
            precision=precision,
            recurrent=self.model.recurrent,
            images=policy_spec.has_images,
        )
        self.gradient_step = gradient_step(
            self.batch_loss,
            model=self.model,
            guard=self.step,
            compiled=self.compiled,
            dynamic=True,
            switch=compile_switch,
        )

    def training_step(self) -> StepResult:
        return self.sample_and_update(min_rollouts=self.batches_per_update)

    def learning_inputs(self, batch) -> dict:
        """V-trace targets and advantages of the whole batch, time-major [T, E], with the
        learning rate: per environment column, done once (by the learner that samples, in a learner group)."""
        lr = self.count_steps(batch)
        with torch.no_grad():  # the targets: one forward pass, then V-trace in numpy
            inputs, _, _, _ = vtrace_inputs(self.model, batch, self.learning_rewards(batch), self.device)
        vs, pg_advantages = compute_vtrace(**inputs, **self.vtrace)
        return {
            "obs": batch.obs,
            "actions": batch.actions,
            "pg_advantages": pg_advantages,
            "returns": vs,
            "valid": batch.valid,
            "states": batch.states,
            "lr": lr,
        }

    def learn(self, inputs: dict) -> dict:
        """The gradient step on the valid steps of `inputs` (see `step_on_valid_steps`)."""
        loss_policy, loss_value, loss_entropy = self.step_on_valid_steps(inputs, LEARNING_ARRAYS).tolist()
        return {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": loss_entropy,
            "gradient_steps": 1,
            **self.step.metrics(),
        }

    def batch_loss(self, obs, actions, pg_advantages, returns, initial_state=None, valid=None):
        """The loss of a batch's valid steps and its parts (what algo.compile compiles). A
        recurrent policy's batch is whole rollouts ([T, E] arrays, `initial_state` and `valid`)."""
        logp, entropy, values = evaluate_steps(
            self.model, {"obs": obs, "actions": actions, "initial_state": initial_state, "valid": valid}
        )
        pg_advantages, returns = valid_steps(pg_advantages, valid), valid_steps(returns, valid)
        p_loss = policy_gradient_loss(logp, pg_advantages)
        v_loss = value_loss(values, returns, None, None)
        entropy = entropy.mean()
        return p_loss + self.value_coef * v_loss - self.entropy_coef * entropy, torch.stack((p_loss, v_loss, entropy))
