"""IMPALA (Espeholt et al. 2018): V-trace corrects for the policy that acted not being the learner's.

One iteration: take the rollouts that have arrived (at least `batches_per_update`) -> evaluate
them with the learner's current policy and values -> V-trace targets and policy-gradient
advantages, bootstrapped from the learner's own value of each rollout's last observation -> one
pass of shuffled minibatches over the batch (`minibatch_size`; null: the paper's single gradient
step on the whole batch) -> new weights. Sampling is blocking unless
`parallel.sync_mode=non_blocking` asks for actors that sample on with stale weights: the lag is
then reported every iteration and, unlike PPO's, not capped (`max_policy_lag` null). With a pass
of minibatches per batch, data one version old already undid learning in measured runs (README,
"APPO, IMPALA and policy lag").

A recurrent policy (`model.recurrent`) takes its targets from the model unrolled over each whole
rollout from the state stored at its start; its minibatches are whole pieces of
`sequence_length` steps (whole rollouts by default), each replayed from its stored state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlpar.algos.base import ActorCriticConfig, Algorithm, StepResult, minibatch_problems
from rlpar.learning.estimators.batch_tensors import vtrace_inputs
from rlpar.learning.estimators.sequences import evaluate_steps, valid_steps
from rlpar.learning.estimators.vtrace import compute_vtrace, offpolicy_metrics
from rlpar.learning.learner import Learner
from rlpar.learning.losses.ppo_loss import policy_gradient_loss, value_loss
from rlpar.learning.optimization.compiled import compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam
from rlpar.learning.optimization.step import LearningRate
from rlpar.typed_config import flag, integer, number, override

# What an update's gradient step takes from its inputs, per valid step.
LEARNING_ARRAYS = ("obs", "actions", "pg_advantages", "returns")  # returns: V-trace's targets vs


@dataclass(frozen=True, kw_only=True)
class IMPALAConfig(ActorCriticConfig):
    """IMPALA's keys (conf/algo/impala.yaml): V-trace's, besides every learner's."""

    lr: float = override(ActorCriticConfig, "lr", 1e-3)
    anneal_lr: bool = override(ActorCriticConfig, "anneal_lr", True)
    max_grad_norm: float = override(ActorCriticConfig, "max_grad_norm", 0.5)
    vtrace_lambda: float = number(0.95, low=0, high=1)
    clip_rho_threshold: float = number(1.0, low=0, low_open=True, infinite_ok=True)  # inf: no truncation
    clip_c_threshold: float = number(1.0, low=0, low_open=True, infinite_ok=True)
    batches_per_update: int = integer(1, low=1)  # worker rollouts per update
    minibatch_size: int | None = integer(64, low=1, optional=True)  # None: one step on the whole batch
    normalize_advantages: bool = flag(True)  # over each minibatch
    # Box actions: the weight of the penalty on Gaussian means past their action bounds
    # (ActorCriticBase.bounds_penalty); 0: none
    bounds_loss_coef: float = number(0.01, low=0)
    sequence_length: int | None = integer(None, low=1, optional=True)  # a recurrent policy's pieces (None: rollout)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        return super().config_problems(config) + minibatch_problems(config)


class IMPALALearner(Learner):
    """IMPALA's update: one gradient step of the V-trace actor-critic loss on a batch's
    prepared targets and advantages, or one pass of shuffled minibatches over it."""

    rng: np.random.Generator

    def __init__(
        self,
        config: IMPALAConfig,
        *,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        batch_steps: int,
    ):
        """`compile`: the whole gradient step with torch.compile, for every batch size (the
        valid steps of a batch vary) (rlpar.learning.optimization.compiled), used from gradient step
        `compile_switch` on (or `ready`: as soon as it is compiled). `batch_steps`: the steps of
        one gradient step's batch."""
        super().__init__(policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device)
        self.set_optimizer(
            adam(self.parameters, lr=config.lr, eps=1e-5),
            max_grad_norm=config.max_grad_norm,
            max_consecutive_nonfinite=config.max_consecutive_nonfinite,
            precision=config.precision,
        )
        self.lr = LearningRate(config.lr, config.anneal_lr, config.min_lr_fraction)
        self.value_coef, self.entropy_coef = config.value_coef, config.entropy_coef
        self.bounds_loss_coef = config.bounds_loss_coef if not policy_spec.action.discrete else 0.0
        self.compiled = compile_setting(
            config.compile,
            expected_gradient_steps=total_steps // (config.minibatch_size or batch_steps),
            precision=config.precision,
            recurrent=self.model.recurrent,
            images=policy_spec.has_images,
        )
        self.minibatch_size, self.sequence_length = config.minibatch_size, config.sequence_length
        self.normalize_advantages = config.normalize_advantages
        self.gradient_step = gradient_step(
            self.batch_loss,
            model=self.model,
            guard=self.step,
            compiled=self.compiled,
            dynamic=self.minibatch_size is None,  # whole batches: their valid steps vary
            switch=config.compile_switch,
        )
        self.rng = np.random.default_rng([seed, 3])

    def learn(self, inputs: dict) -> dict:
        """The gradient step on the valid steps of `inputs` (see `step_on_valid_steps`), or with
        `minibatch_size` a pass of minibatches over them (`minibatch_pass`)."""
        if self.minibatch_size is None:
            parts = self.step_on_valid_steps(inputs, LEARNING_ARRAYS, sequence_length=self.sequence_length)
            steps = 1
        else:
            self.peers.receive(self.model, self.optimizer, inputs["lr"])
            data = self.learning_tensors(inputs, LEARNING_ARRAYS, sequence_length=self.sequence_length)
            stats, samples = self.minibatch_pass(data, self.minibatch_size)
            self.gradient_step.settle()
            steps = len(stats)
            parts = self.minibatch_means(stats, samples, 4)
        loss_policy, loss_value, loss_entropy, loss_bounds = parts.tolist()
        return {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": loss_entropy,
            "loss_bounds": loss_bounds,
            "gradient_steps": steps,
            **self.step.metrics(),
        }

    def batch_loss(self, obs, actions, pg_advantages, returns, initial_state=None, valid=None):
        """The loss of a batch's valid steps and its parts (what algo.compile compiles). A
        recurrent policy's batch is whole rollouts ([T, E] arrays, `initial_state` and `valid`)."""
        data = {"obs": obs, "actions": actions, "initial_state": initial_state, "valid": valid}
        logp, entropy, values, bounds = evaluate_steps(self.model, data, with_bounds=True)
        pg_advantages, returns = valid_steps(pg_advantages, valid), valid_steps(returns, valid)
        if self.normalize_advantages:  # over the minibatch: all its rows, every learner's
            pg_advantages = self.peers.normalize(pg_advantages)
        p_loss = policy_gradient_loss(logp, pg_advantages)
        v_loss = value_loss(values, returns, None, None)
        entropy, bounds = entropy.mean(), bounds.mean()
        loss = p_loss + self.value_coef * v_loss - self.entropy_coef * entropy
        if self.bounds_loss_coef:
            loss = loss + self.bounds_loss_coef * bounds
        return loss, torch.stack((p_loss, v_loss, entropy, bounds))


class IMPALA(Algorithm):
    """One iteration: the rollouts that arrived, their V-trace targets (`learning_inputs`, once,
    with the learner's current model), the learner's gradient step, the update's end."""

    Config = IMPALAConfig
    learner_class: type[IMPALALearner] = IMPALALearner
    learner: IMPALALearner
    # Sampling overlaps learning only on request (parallel.sync_mode=non_blocking): with a pass
    # of minibatches per batch, data one or more versions old undoes learning (README, Algorithms).
    sync_mode = "blocking"
    max_policy_lag = None
    data_parallel = True
    recurrent_policies = True

    def learner_options(self, config: IMPALAConfig, sampler) -> dict:
        """Its learner is told the size of an update's batch (batches_per_update workers' rollouts)."""
        return {"batch_steps": max(sampler.rollout_length * sampler.worker_envs * config.batches_per_update, 1)}

    def __init__(self, config: IMPALAConfig, *, sampler, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        super().__init__(
            config, sampler=sampler, policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device
        )
        self.vtrace: dict[str, Any] = dict(
            gamma=config.gamma,
            vtrace_lambda=config.vtrace_lambda,
            clip_rho_threshold=config.clip_rho_threshold,
            clip_c_threshold=config.clip_c_threshold,
        )
        self.batches_per_update = config.batches_per_update
        self.offpolicy: dict = {}  # the last batch's off-policy measures (`offpolicy_metrics`)

    def training_step(self) -> StepResult:
        return self.sample_and_update(min_rollouts=self.batches_per_update)

    def update(self, batch) -> dict:
        """The on-policy update, and how off-policy its batch was."""
        return {**super().update(batch), **self.offpolicy}

    def vtrace_targets(self, model, batch) -> tuple[dict, np.ndarray, np.ndarray]:
        """`model`'s V-trace inputs for `batch` (one forward pass, no gradient), then its value
        targets and policy-gradient advantages; keeps how off-policy the batch was."""
        with torch.no_grad():
            inputs, _, _, _ = vtrace_inputs(model, batch, self.learning_rewards(batch), self.device)
        vs, advantages = compute_vtrace(**inputs, **self.vtrace)
        self.offpolicy = offpolicy_metrics(inputs["target_logp"], batch.logp, batch.valid)
        return inputs, vs, advantages

    def learning_inputs(self, batch) -> dict:
        """V-trace targets and advantages of the whole batch, time-major [T, E], with the
        learning rate: per environment column, done once (by the learner that samples, in a learner group)."""
        lr = self.count_steps(batch)
        _, vs, pg_advantages = self.vtrace_targets(self.model, batch)
        return {
            "obs": batch.obs,
            "actions": batch.actions,
            "pg_advantages": pg_advantages,
            "returns": vs,
            "valid": batch.valid,
            "states": batch.states,
            "lr": lr,
        }
