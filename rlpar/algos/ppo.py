"""Proximal Policy Optimization (Schulman et al. 2017): clipped objective, GAE, minibatch epochs.

One iteration: act with the current weights -> GAE advantages -> `epochs` passes of shuffled
minibatches -> new weights. Runs on every sampler; `sync_mode=blocking` keeps it on-policy.
A recurrent policy (`model.recurrent`) learns from pieces of `sequence_length` steps of each
environment (whole rollouts by default), each replayed from its stored state: minibatches are
whole pieces (rlpar.learning.estimators.sequences).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlpar.algos.base import ActorCriticConfig, Algorithm, StepResult, minibatch_problems
from rlpar.learning.estimators.batch_tensors import advantage_inputs
from rlpar.learning.estimators.gae import compute_gae
from rlpar.learning.estimators.sequences import (
    evaluate_steps,
    minibatches,
    piece_count,
    sequence_stats,
    valid_steps,
)
from rlpar.learning.learner import Learner
from rlpar.learning.losses.ppo_loss import approx_kl, clip_fraction, clipped_policy_loss, value_loss
from rlpar.learning.optimization.compiled import compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam
from rlpar.learning.optimization.step import LearningRate
from rlpar.typed_config import flag, integer, number

# What an update's gradient steps take from its inputs, per valid step.
LEARNING_ARRAYS = ("obs", "actions", "old_logp", "old_values", "advantages", "returns")


@dataclass(frozen=True, kw_only=True)
class PPOConfig(ActorCriticConfig):
    """PPO's keys (conf/algo/ppo.yaml), besides every learner's."""

    gae_lambda: float = number(0.95, low=0, high=1)
    clip: float = number(0.2, low=0, high=1, low_open=True, high_open=True)
    epochs: int = integer(10, low=1)
    minibatch_size: int = integer(64, low=1)
    normalize_advantages: bool = flag(True)
    value_clip: float | None = number(None, low=0, low_open=True, optional=True)
    target_kl: float | None = number(None, low=0, low_open=True, optional=True)  # stop the epochs past this KL
    sequence_length: int | None = integer(None, low=1, optional=True)  # a recurrent policy's pieces (None: rollout)

    @classmethod
    def config_problems(cls, config) -> list[str]:
        return super().config_problems(config) + minibatch_problems(config)


class PPOLearner(Learner):
    """PPO's update: minibatch epochs of the clipped objective on a batch's prepared inputs."""

    input_layout = "columns+minibatches"  # each learner's columns and its rows of every minibatch
    rng: np.random.Generator

    def __init__(
        self,
        config: PPOConfig,
        *,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        batch_steps: int,
    ):
        """`compile`: the whole minibatch step with torch.compile (rlpar.learning.optimization.compiled),
        used from gradient step `compile_switch` on (or `ready`: as soon as it is compiled).
        `batch_steps`: the steps of one update's batch (rollout_length x environments)."""
        super().__init__(policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device)
        self.set_optimizer(
            adam(self.parameters, lr=config.lr, eps=1e-5),
            max_grad_norm=config.max_grad_norm,
            max_consecutive_nonfinite=config.max_consecutive_nonfinite,
            precision=config.precision,
        )
        self.lr = LearningRate(config.lr, config.anneal_lr, config.min_lr_fraction)
        self.clip, self.value_clip = config.clip, config.value_clip
        self.value_coef, self.entropy_coef = config.value_coef, config.entropy_coef
        self.epochs, self.minibatch_size = config.epochs, config.minibatch_size
        self.normalize_advantages = config.normalize_advantages
        self.target_kl = config.target_kl
        self.sequence_length = config.sequence_length
        self.value_norm = getattr(self.model, "value_normalizer", None) is not None
        self.rng = np.random.default_rng([seed, 2])  # each epoch's shuffle (drawn by its algorithm)
        self.compiled = compile_setting(
            config.compile,
            expected_gradient_steps=total_steps * config.epochs // config.minibatch_size,
            precision=config.precision,
            recurrent=self.model.recurrent,
            images=policy_spec.has_images,
        )
        # Compiled, 4 minibatch steps per graph: 274 -> 199 us a step (benchmarks/learner_step.py).
        # A minibatch as large as the batch is the batch's valid steps, whose count varies: then
        # one step per graph, compiled for any size.
        whole_batch = batch_steps <= config.minibatch_size
        self.gradient_step = gradient_step(
            self.minibatch_loss,
            model=self.model,
            guard=self.step,
            compiled=self.compiled,
            dynamic=whole_batch,
            unroll=1 if whole_batch else 4,
            switch=config.compile_switch,
        )

    def learn(self, inputs: dict) -> dict:
        """The gradient steps of one update on time-major [T, E] inputs: the whole batch, or in a
        learner group this learner's environment columns of it (`input_layout`). Everything
        that reads the whole batch or keeps running statistics (rewards, GAE, the observation
        normaliser) happened before, where the batch was sampled (PPO.learning_inputs)."""
        self.peers.receive(self.model, self.optimizer, inputs["lr"])
        data = self.learning_tensors(inputs, LEARNING_ARRAYS, sequence_length=self.sequence_length)
        data["behaviour_weights"] = torch.ones_like(data["old_logp"])
        if inputs["lagged"]:
            self.decouple_from_behaviour(data)
        return self.optimise(data, inputs)

    @torch.no_grad()
    def decouple_from_behaviour(self, data: dict) -> None:
        """A batch acted by older weights (non_blocking): decoupled PPO (Hilton et al. 2021,
        "Batch size-invariance for policy optimization"). The clip is taken around the current
        policy, not the one that acted, and each sample's advantage is weighted by
        pi_current / pi_behaviour: after an update of hundreds of gradient steps, ratios against
        the behaviour policy would start far outside the clip range."""
        current_logp = evaluate_steps(self.model, data, with_entropy=False)[0]
        valid = data.get("valid")
        if valid is None:
            data["behaviour_weights"] = (current_logp - data["old_logp"]).exp()
            data["old_logp"] = current_logp
        else:  # pieces: the valid steps' entries (the others are never read)
            data["behaviour_weights"][valid] = (current_logp - data["old_logp"][valid]).exp()
            data["old_logp"] = data["old_logp"].clone()
            data["old_logp"][valid] = current_logp

    def optimise(self, data: dict, inputs: dict | None = None) -> dict:
        """Minibatch epochs. Per-op overhead dominates small MLPs, so each epoch shuffles once
        and slices contiguous views, and diagnostics (KL, clip fraction, entropy) are computed
        once per epoch or update from detached log-probabilities, not in every step.
        `inputs`: the shuffles and the minibatch size (and with peers this learner's minibatch
        shares); None: drawn here."""
        if inputs is None:
            inputs = {
                "orders": [self.rng.permutation(len(data["obs"])) for _ in range(self.epochs)],
                "minibatch_size": self.minibatch_size,
            }
        losses, samples, epoch_stats = [], [], []
        for epoch in range(self.epochs):
            new_logps, old_logps = [], []
            for part in self.epoch_minibatches(data, inputs, epoch):
                _, p_loss, v_loss, logp = self.gradient_step.steps(**part)
                losses.append(torch.stack((p_loss, v_loss), dim=1))
                samples += [logp.numel() // len(p_loss)] * len(p_loss)
                new_logps.append(logp.reshape(-1))
                old_logps.append(valid_steps(part["old_logp"], part.get("valid")).reshape(-1))
            new_logp, old_logp = torch.cat(new_logps), torch.cat(old_logps)
            epoch_stats.append(
                torch.stack((approx_kl(new_logp, old_logp), clip_fraction(new_logp, old_logp, self.clip)))
            )
            # over every learner's steps: all stop at the same epoch (target_kl)
            epoch_stats[-1] = self.peers.mean(epoch_stats[-1], samples=len(new_logp))
            if self.target_kl is not None and epoch_stats[-1][0].item() > self.target_kl:
                break
        self.gradient_step.settle()
        # each minibatch's over all its rows (every learner's), then the mean; non-finite steps left out
        loss_policy, loss_value = self.peers.means_per_row(torch.cat(losses), samples=samples).nanmean(0).tolist()
        kl, clip_frac = torch.stack(epoch_stats).mean(0).tolist()
        with torch.no_grad():
            _, entropy, _ = evaluate_steps(self.model, data)
        out = {
            "loss_policy": loss_policy,
            "loss_value": loss_value,
            "loss_entropy": self.peers.mean(entropy.mean(), samples=entropy.numel()).item(),
            "approx_kl": kl,
            "clip_fraction": clip_frac,
            "epochs": len(epoch_stats),
            "gradient_steps": sum(len(group) for group in losses),
            **self.step.metrics(),
        }
        if not self.model.discrete:
            out["policy_std"] = float(self.model.log_std.detach().exp().mean())
        if "valid" in data:
            out.update(sequence_stats(data["valid"]))
        return out

    def epoch_minibatches(self, data: dict, inputs: dict, epoch: int):
        """One epoch's minibatches, each with a leading dimension of minibatches
        (rlpar.learning.estimators.sequences.minibatches: rows `unroll` at a time, or whole pieces); with
        peers, this learner's rows of each (`input_layout`), one at a time."""
        share = inputs.get("minibatches")
        if share is not None and "valid" not in data:
            order, ends = torch.from_numpy(share["orders"][epoch]), share["ends"][epoch]
            for start, end in zip([0, *ends[:-1]], ends):
                rows = order[start:end]
                yield {k: v[rows][None] for k, v in data.items()}
            return
        yield from minibatches(
            data,
            torch.from_numpy(inputs["orders"][epoch]),
            size=inputs["minibatch_size"],
            unroll=self.gradient_step.unroll,
        )

    def minibatch_loss(
        self,
        obs,
        actions,
        old_logp,
        old_values,
        advantages,
        returns,
        behaviour_weights=None,
        initial_state=None,
        valid=None,
    ):
        """The loss of one minibatch and its parts (what algo.compile compiles).
        `behaviour_weights`: pi_current / pi_behaviour for a lagged batch (update() passes ones otherwise).
        A recurrent policy's minibatch is pieces ([L, P] arrays, `initial_state` and `valid`):
        the loss is over their valid steps."""
        with_entropy = self.entropy_coef != 0
        logp, entropy, values = evaluate_steps(
            self.model,
            {"obs": obs, "actions": actions, "initial_state": initial_state, "valid": valid},
            with_entropy=with_entropy,
        )
        if valid is not None:
            old_logp, old_values, advantages, returns, behaviour_weights = (
                valid_steps(x, valid) for x in (old_logp, old_values, advantages, returns, behaviour_weights)
            )
        if self.normalize_advantages:  # over the minibatch: all its rows, every learner's
            advantages = self.peers.normalize(advantages)
        if behaviour_weights is not None:
            advantages = advantages * behaviour_weights
        p_loss = clipped_policy_loss(logp, old_logp, advantages, self.clip)
        if self.value_norm:  # the critic learns normalised returns (model.value_norm, MAPPO's ValueNorm)
            values, returns, old_values = (self.model.normalised(x) for x in (values, returns, old_values))
        v_loss = value_loss(values, returns, old_values, self.value_clip)
        loss = p_loss + self.value_coef * v_loss
        if with_entropy:
            loss = loss - self.entropy_coef * entropy.mean()
        return loss, p_loss, v_loss, logp


class PPO(Algorithm):
    """One iteration: a batch, its advantages and shuffles (`learning_inputs`, once), the
    learner's epochs on them (by every learner, `self.peers`), the update's end."""

    Config = PPOConfig
    learner_class: type[PPOLearner] = PPOLearner
    learner: PPOLearner
    data_parallel = True
    recurrent_policies = True

    def learner_options(self, config: PPOConfig, sampler) -> dict:
        """Its learner is told the size of a batch (the sampler's rollout_length x num_envs)."""
        return {"batch_steps": sampler.rollout_length * sampler.num_envs}

    def __init__(self, config: PPOConfig, *, sampler, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        super().__init__(
            config, sampler=sampler, policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device
        )
        self.gamma, self.gae_lambda = config.gamma, config.gae_lambda
        self.minibatch_size = config.minibatch_size

    def training_step(self) -> StepResult:
        # non_blocking: the workers sample on while the learner updates, and an update still
        # takes a full batch (a rollout from every worker's worth), so the batch size is the same
        # in both modes; lagging rollouts are dropped (max_policy_lag)
        full_batch = getattr(self.sampler, "sync_mode", "blocking") == "non_blocking"
        return self.sample_and_update(min_rollouts=self.sampler.num_rollout_workers if full_batch else 1)

    def learning_inputs(self, batch) -> dict:
        """What the gradient steps take from a batch (`ppo_inputs`): the part of an update that
        reads the whole batch and advances running statistics (steps seen, rewards), done once
        (by the learner that samples, in a learner group)."""
        lr = self.count_steps(batch)
        return ppo_inputs(
            self.learner,
            batch,
            self.learning_rewards(batch),
            lr=lr,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            lagged=batch.policy_version < self.version,
            minibatch_size=self.minibatch_size_for(int(batch.valid.sum())),
        )

    def minibatch_size_for(self, steps: int) -> int:
        """The minibatch size of an update of `steps` valid steps: `minibatch_size`."""
        return self.minibatch_size


def ppo_inputs(
    learner: PPOLearner,
    batch,
    rewards,
    *,
    lr: float,
    gamma: float,
    gae_lambda: float,
    lagged: bool,
    minibatch_size: int,
) -> dict:
    """What `learner`'s gradient steps take from a batch, time-major [T, E], with the learning
    rate `lr`: GAE advantages and returns of the learning `rewards`, the value normaliser's
    statistics of the returns (before the epochs that learn them), and each epoch's shuffle (of
    valid steps, or of a recurrent policy's pieces), drawn here from the learner's generator: in
    a learner group, every learner learns its part of the same minibatches."""
    advantages, returns = compute_gae(**advantage_inputs(batch, rewards), gamma=gamma, gae_lambda=gae_lambda)
    model = learner.model
    if learner.value_norm:
        targets = returns[batch.valid].astype(np.float64)
        model.value_normalizer.update(targets.mean(keepdims=True), targets.var(keepdims=True), targets.size)
    steps, envs = batch.valid.shape
    size = piece_count(steps, envs, learner.sequence_length) if model.recurrent else int(batch.valid.sum())
    return {
        "obs": batch.obs,
        "actions": batch.actions,
        "old_logp": batch.logp,
        "old_values": batch.values,
        "advantages": advantages,
        "returns": returns,
        "valid": batch.valid,
        "states": batch.states,
        "lr": lr,
        "lagged": lagged,
        "orders": [learner.rng.permutation(size) for _ in range(learner.epochs)],
        "minibatch_size": minibatch_size,
    }
