"""APPO (asynchronous PPO): IMPALA's actors with PPO's clipped objective on V-trace advantages.

One iteration: take the rollouts that have arrived -> V-trace targets and advantages computed
with a *target network* (a copy of the policy refreshed every `target_update_every` gradient
steps) -> the batch joins a small circular buffer, where each batch is trained on in
`reuse_per_batch` updates before it is dropped: `epochs` passes of minibatches in its own, one
pass in each later one (older batches first, the new one last) -> new weights. With
`publish_after_epochs`, the workers get the weights after the new batch's first passes and sample
the next batch while the learner takes the others. The surrogate's ratio is the current policy
over the one that acted, clipped as in PPO; an optional KL penalty keeps the policy near the
target network.

Sampling is blocking unless `parallel.sync_mode=non_blocking` asks for actors that sample on with
stale weights: V-trace and the clip correct small lags, but with PPO's learning per sample (32
gradient steps a 2,048-step batch) data one version old already undid learning in measured runs.

A recurrent policy (`model.recurrent`) takes its V-trace targets from the target network
unrolled over each whole rollout from the state stored at its start; its minibatches are whole
pieces of `sequence_length` steps (whole rollouts by default), each replayed from its stored
state (rlpar.learning.estimators.sequences), as PPO's.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from rlpar.algos.base import ActorCriticConfig
from rlpar.algos.impala import IMPALA, IMPALAConfig
from rlpar.learning.estimators.sequences import evaluate_steps, valid_steps
from rlpar.learning.learner import Learner
from rlpar.learning.losses.ppo_loss import approx_kl, clip_fraction, clipped_policy_loss, value_loss
from rlpar.learning.optimization.compiled import compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam
from rlpar.learning.optimization.step import LearningRate
from rlpar.typed_config import integer, number, override

# What an update's gradient steps take from its inputs, per valid step.
LEARNING_ARRAYS = ("obs", "actions", "behaviour_logp", "target_logp", "advantages", "returns")
# The means over an update's gradient steps that its `learn` reports.
LOSS_MEANS = ("loss_policy", "loss_value", "loss_entropy", "approx_kl", "clip_fraction", "loss_bounds")


@dataclass(frozen=True, kw_only=True)
class APPOConfig(IMPALAConfig):
    """APPO's keys (conf/algo/appo.yaml): IMPALA's V-trace, PPO's clipped minibatch epochs on a
    buffer of batches, and a target network."""

    lr: float = override(ActorCriticConfig, "lr", 5e-4)
    anneal_lr: bool = override(ActorCriticConfig, "anneal_lr", False)
    vtrace_lambda: float = override(IMPALAConfig, "vtrace_lambda", 1.0)
    entropy_coef: float = override(ActorCriticConfig, "entropy_coef", 0.0)
    clip: float = number(0.2, low=0, high=1, low_open=True, high_open=True)
    kl_coef: float = number(0.0, low=0)
    minibatch_size: int = integer(64, low=1)  # always minibatches
    normalize_advantages: bool = override(IMPALAConfig, "normalize_advantages", True)
    bounds_loss_coef: float = override(IMPALAConfig, "bounds_loss_coef", 0.0)  # the clip keeps its means near
    reuse_per_batch: int = integer(2, low=1)  # updates each batch is trained in, one pass each after its first
    buffer_batches: int = integer(4, low=1)  # batches kept for reuse
    target_update_every: int = integer(4, low=1)  # updates between target-network copies
    epochs: int = integer(1, low=1)  # passes over each new batch in the update it arrives in
    # the new batch's passes after which the workers get the weights and sample the next batch
    # while the learner takes the rest (None: after them all)
    publish_after_epochs: int | None = integer(None, low=1, optional=True)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        problems = super().config_problems(config)
        epochs, publish = config.get("algo.epochs"), config.get("algo.publish_after_epochs")
        if isinstance(epochs, int) and isinstance(publish, int) and publish > epochs:
            problems.append(
                f"algo.publish_after_epochs: {publish} is more than algo.epochs ({epochs}), the passes over a new batch"
            )
        return problems


class APPOLearner(Learner):
    """APPO's update: passes of shuffled minibatches of the clipped objective over a buffer of
    recent batches, against a target network that follows every few steps."""

    rng: np.random.Generator

    def __init__(self, config: APPOConfig, *, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        """`compile`: the whole minibatch step with torch.compile (rlpar.learning.optimization.compiled),
        used from gradient step `compile_switch` on (or `ready`: as soon as it is compiled).
        `sequence_length`: a recurrent policy's learning pieces, in steps (None: the rollout)."""
        super().__init__(policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device)
        self.set_optimizer(
            adam(self.parameters, lr=config.lr, eps=1e-5),
            max_grad_norm=config.max_grad_norm,
            max_consecutive_nonfinite=config.max_consecutive_nonfinite,
            precision=config.precision,
        )
        self.lr = LearningRate(config.lr, config.anneal_lr, config.min_lr_fraction)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.clip, self.kl_coef = config.clip, config.kl_coef
        self.value_coef, self.entropy_coef = config.value_coef, config.entropy_coef
        self.bounds_loss_coef = config.bounds_loss_coef if not policy_spec.action.discrete else 0.0
        self.minibatch_size, self.normalize_advantages = config.minibatch_size, config.normalize_advantages
        self.reuse_per_batch, self.target_update_every = config.reuse_per_batch, config.target_update_every
        # the new batch's passes before its weights go to the workers, and after
        self.first_epochs = config.epochs if config.publish_after_epochs is None else config.publish_after_epochs
        self.later_epochs = config.epochs - self.first_epochs
        self.compiled = compile_setting(
            config.compile,
            expected_gradient_steps=total_steps * (config.epochs + config.reuse_per_batch - 1) // config.minibatch_size,
            precision=config.precision,
            recurrent=self.model.recurrent,
            images=policy_spec.has_images,
        )
        self.sequence_length = config.sequence_length
        self.gradient_step = gradient_step(
            self.minibatch_loss, model=self.model, guard=self.step, compiled=self.compiled, switch=config.compile_switch
        )
        self.buffer: deque = deque(maxlen=config.buffer_batches)  # [prepared batch, uses left]
        self.gradient_steps = 0
        self.rng = np.random.default_rng([seed, 3])

    def learn(self, inputs: dict) -> dict:
        """The batch (the whole one, or with peers this learner's environment columns of it)
        joins the buffer; one pass over each older batch still in use, oldest first, then
        `publish_after_epochs` passes over the new one. With `inputs["later_epochs"]`: the new
        batch's other passes, `later_epochs` of them (the rest of an update whose weights went to
        the workers after its first passes)."""
        self.peers.receive(self.model, self.optimizer, inputs["lr"])
        data = self.learning_tensors(inputs, LEARNING_ARRAYS, sequence_length=self.sequence_length)
        passes = [(data, self.later_epochs)] if inputs.get("later_epochs") else self.passes(data, self.first_epochs)
        stats: list = []
        samples: list = []
        for batch, count in passes:
            for _ in range(count):
                batch_stats, batch_samples = self.train_on(batch)
                stats, samples = stats + batch_stats, samples + batch_samples
        self.gradient_step.settle()
        losses = self.minibatch_means(stats, samples, len(LOSS_MEANS)).tolist()
        return {
            **dict(zip(LOSS_MEANS, losses, strict=True)),
            "gradient_steps": len(stats),
            "buffered_batches": len(self.buffer),
            **self.step.metrics(),
        }

    def passes(self, data: dict, epochs: int) -> list[tuple[dict, int]]:
        """What one update takes from the buffer once `data` has joined it: a pass over each
        older batch still in use (oldest first), then `epochs` over `data`; each batch's uses
        left count down, and a used-up one leaves."""
        self.buffer.append([data, self.reuse_per_batch])
        passes = [(entry[0], 1) for entry in self.buffer]
        passes[-1] = (data, epochs)
        for entry in list(self.buffer):
            entry[1] -= 1
            if entry[1] == 0:
                self.buffer.remove(entry)
        return passes

    def train_on(self, data: dict) -> tuple[list[torch.Tensor], list[int]]:
        """One pass of shuffled minibatches (`minibatch_pass`); the target network follows every
        few steps, on every learner alike."""
        return self.minibatch_pass(data, self.minibatch_size, after_step=self.count_step)

    def count_step(self) -> None:
        self.gradient_steps += 1
        if self.gradient_steps % self.target_update_every == 0:
            self.target_model.load_state_dict(self.model.state_dict())

    def on_joining_peers(self) -> None:
        """Every learner's buffer starts empty, so that all hold batches of the same updates and
        take the same number of steps (one joining again would hold another's columns)."""
        self.buffer.clear()

    def minibatch_loss(
        self, obs, actions, behaviour_logp, target_logp, advantages, returns, initial_state=None, valid=None
    ):
        """The loss of one minibatch and its parts (what algo.compile compiles). A recurrent
        policy's minibatch is pieces ([L, P] arrays, `initial_state` and `valid`): the loss is
        over their valid steps."""
        data = {"obs": obs, "actions": actions, "initial_state": initial_state, "valid": valid}
        logp, entropy, values, bounds = evaluate_steps(self.model, data, with_bounds=True)
        if valid is not None:
            behaviour_logp, target_logp, advantages, returns = (
                valid_steps(x, valid) for x in (behaviour_logp, target_logp, advantages, returns)
            )
        if self.normalize_advantages:  # over the minibatch: all its rows, every learner's
            advantages = self.peers.normalize(advantages)
        p_loss = clipped_policy_loss(logp, behaviour_logp, advantages, self.clip)
        v_loss = value_loss(values, returns, None, None)
        entropy, bounds = entropy.mean(), bounds.mean()
        kl = approx_kl(logp, target_logp) if self.kl_coef == 0 else _kl_with_grad(logp, target_logp)
        loss = p_loss + self.value_coef * v_loss - self.entropy_coef * entropy + self.kl_coef * kl
        if self.bounds_loss_coef:
            loss = loss + self.bounds_loss_coef * bounds
        parts = (p_loss, v_loss, entropy, kl, clip_fraction(logp, behaviour_logp, self.clip), bounds)
        return loss, torch.stack(parts)

    def state_dict(self) -> dict:
        """Model, optimiser and counters, the target network and the buffer (a resumed local run
        continues exactly)."""
        return {
            **super().state_dict(),
            "target_model": self.target_model.state_dict(),
            "buffer": [{"data": data, "uses_left": uses} for data, uses in self.buffer],
            "gradient_steps": self.gradient_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.target_model.load_state_dict(state["target_model"])
        self.buffer.clear()
        self.buffer.extend([entry["data"], int(entry["uses_left"])] for entry in state["buffer"])
        self.gradient_steps = int(state["gradient_steps"])


class APPO(IMPALA):
    """One iteration: the rollouts that arrived, their V-trace targets from the learner's
    target network (`learning_inputs`, once), the learner's passes, the update's end (IMPALA's
    iteration with APPO's learner)."""

    Config = APPOConfig  # type: ignore[assignment]  # its minibatch_size is never null
    learner_class: type[APPOLearner] = APPOLearner  # type: ignore[assignment]
    learner: APPOLearner  # type: ignore[assignment]
    # Sampling overlaps learning only on request (parallel.sync_mode=non_blocking): with updates
    # of PPO's size, data one or more versions old undoes learning (README, Algorithms).
    sync_mode = "blocking"

    def learner_options(self, config: IMPALAConfig, sampler) -> dict:
        """Its learner sizes its steps by `minibatch_size`, not by the batch."""
        return {}

    def update(self, batch) -> dict:
        """The learner's passes over the buffer and the new batch, then the update's end. With
        `publish_after_epochs` below `epochs` the end comes after the new batch's first passes:
        the observation statistics take it in, the version advances and the next batch is begun
        with these weights (`begin_sampling`: its workers step environments meanwhile, where
        they are processes of their own); the remaining passes follow. The next batch then lags
        the learner by those passes, which V-trace and the clip correct, and every sampler gives
        the same numbers."""
        inputs = self.learning_inputs(batch)
        stats = self.peers.learn(self.learner, inputs)
        finished = self.finish_update(batch, inputs["returns"])
        if self.learner.later_epochs:
            self.begin_sampling()
            stats = _combined(stats, self.peers.learn(self.learner, {**inputs, "later_epochs": True}))
        return {**stats, "lr": inputs["lr"], **finished, **self.offpolicy}

    def learning_inputs(self, batch) -> dict:
        """V-trace targets and advantages of the whole batch from the target network, time-major
        [T, E], with the learning rate: per environment column, done once (by the learner that
        samples, in a learner group, whose learners' target networks are all the same)."""
        lr = self.count_steps(batch)
        inputs, vs, advantages = self.vtrace_targets(self.learner.target_model, batch)
        return {
            "obs": batch.obs,
            "actions": batch.actions,
            "behaviour_logp": batch.logp,
            "target_logp": inputs["target_logp"],
            "advantages": advantages,
            "returns": vs,
            "valid": batch.valid,
            "states": batch.states,
            "lr": lr,
        }


def _combined(first: dict, later: dict) -> dict:
    """One update's diagnostics from those of its two parts: the losses' means weighted by the
    gradient steps of each, the steps summed, the rest as the later part left them."""
    steps = first["gradient_steps"] + later["gradient_steps"]
    if not first["gradient_steps"] or not later["gradient_steps"]:  # (a part without steps has NaN means)
        means = {k: (first if first["gradient_steps"] else later)[k] for k in LOSS_MEANS}
    else:
        weight = first["gradient_steps"] / steps
        means = {k: weight * first[k] + (1 - weight) * later[k] for k in LOSS_MEANS}
    return {**later, **means, "gradient_steps": steps}


def _kl_with_grad(logp: torch.Tensor, target_logp: torch.Tensor) -> torch.Tensor:
    """KL(target || current) estimated on the sampled actions (k3), differentiable in `logp`."""
    log_ratio = logp - target_logp
    return ((log_ratio.exp() - 1.0) - log_ratio).mean()
