"""DQN (Mnih et al. 2015) with the Rainbow-era fixes that matter on small tasks: double-Q targets,
an optional dueling head, n-step returns and proportional prioritised replay.

One iteration: act ε-greedily with the newest published weights -> the rollout's n-step
transitions (followed per global environment id, so rollouts may arrive from any worker) go into
the replay, which the learner owns -> once `learning_starts` transitions are in, `replay_ratio`
gradient steps per env step on minibatches from the replay (Huber loss on the TD error, weighted
by importance weights when prioritised), the target network refreshed by a hard copy every
`target_update_every` gradient steps (or by Polyak averaging with `tau` < 1) -> weights published
to the workers every `weight_sync_interval` updates, with the current ε.
Runs on every sampler; workers act with a numpy copy of the Q-network.

With a recurrent Q-network (`model.recurrent`), R2D2's sequence replay (Kapturowski et al. 2019):
the replay keeps overlapping sequences of `burn_in + sequence_length` steps with the state that
entered their first step (rlpar.replay.sequences); the learner unrolls the burn-in from that
state without training on it, learns on the rest, and prioritises each sequence by a mix of the
max and mean of its TD errors (rlpar.learning.losses.r2d2). `replay.capacity` and `learning_starts`
still count env steps: a sequence brings `sequence_length // 2` new ones.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from rlpar.algos.replay_learner import ReplayLearner, ReplayLearnerConfig, as_tensor
from rlpar.learning.learner import Learner
from rlpar.learning.losses.q_targets import q_targets, weighted_huber
from rlpar.learning.losses.r2d2 import sequence_q_loss
from rlpar.learning.optimization.compiled import compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam, polyak
from rlpar.learning.optimization.step import LearningRate, linear_schedule
from rlpar.replay.sequences import SequenceWriter, sequence_fields
from rlpar.typed_config import flag, integer, number, override


@dataclass(frozen=True, kw_only=True)
class DQNConfig(ReplayLearnerConfig):
    """DQN's keys (conf/algo/dqn.yaml), besides a replay learner's."""

    lr: float = override(ReplayLearnerConfig, "lr", 1e-4)
    max_grad_norm: float = override(ReplayLearnerConfig, "max_grad_norm", 10.0)
    target_update_every: int = integer(250, low=1)  # gradient steps between hard target copies (tau 1)
    tau: float = number(1.0, low=0, high=1, low_open=True)  # < 1: Polyak averaging after every step instead
    double_q: bool = flag(True)
    epsilon_start: float = number(1.0, low=0, high=1)
    epsilon_end: float = number(0.05, low=0, high=1)
    exploration_steps: int = integer(10_000, low=0)  # env steps over which epsilon falls to epsilon_end
    burn_in: int = integer(8, low=0)  # a recurrent Q-network's replayed sequences (else unused)
    sequence_length: int = integer(16, low=1)


class DQNLearner(Learner):
    """DQN's update: gradient steps of the (double) Q-learning loss on replayed minibatches (or a
    recurrent Q-network's sequences), the target network refreshed as each step makes it due."""

    input_layout = "rows"  # each learner learns contiguous rows of every minibatch

    def __init__(self, config: DQNConfig, *, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        """`compile`: the whole minibatch step with torch.compile (rlpar.learning.optimization.compiled),
        used from gradient step `compile_switch` on (or `ready`: as soon as it is compiled);
        `burn_in`, `sequence_length`: a recurrent Q-network's replayed sequences (else unused)."""
        super().__init__(policy_spec=policy_spec, total_steps=total_steps, seed=seed, device=device)
        self.recurrent = policy_spec.recurrent is not None
        self.burn_in, self.n_step, self.gamma = config.burn_in, config.n_step, config.gamma
        self.batch_size = config.batch_size
        self.set_optimizer(
            adam(self.parameters, lr=config.lr, eps=1e-5),
            max_grad_norm=config.max_grad_norm,
            max_consecutive_nonfinite=config.max_consecutive_nonfinite,
            precision=config.precision,
        )
        self.lr = LearningRate(config.lr, config.anneal_lr, config.min_lr_fraction)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.target_update_every, self.tau, self.double_q = config.target_update_every, config.tau, config.double_q
        self.gradient_steps = 0
        self.compiled = compile_setting(
            config.compile,
            expected_gradient_steps=int(config.replay_ratio * total_steps),
            precision=config.precision,
            recurrent=self.recurrent,
            images=policy_spec.has_images,
        )
        loss = self.sequence_loss if self.recurrent else self.minibatch_loss
        self.gradient_step = gradient_step(
            loss, model=self.model, guard=self.step, compiled=self.compiled, switch=config.compile_switch
        )

    def learn(self, inputs: dict) -> dict:
        """The gradient steps on `inputs`' minibatches (whole, or with peers this learner's
        `rows` of each), the target network refreshed as each step makes it due: the |TD errors|
        of every row (every learner's) and each step's (loss, mean |TD error|, mean Q).
        Non-finite steps of a compiled step are counted by `learn_from_replay`'s settle."""
        self.peers.receive(self.model, self.optimizer, inputs["lr"])
        step_td_errors: list[torch.Tensor] = []
        step_losses: list[torch.Tensor] = []
        for transitions, weights in zip(inputs["minibatches"], inputs["weights"]):
            data = {k: as_tensor(v, self.device) for k, v in transitions.items()}
            loss, td, q_taken = self.gradient_step(**data, weights=as_tensor(weights, self.device))
            step_td_errors.append(td.abs())
            step_losses.append(torch.stack([loss, step_td_errors[-1].mean(), q_taken.mean()]))
            self.gradient_steps += 1
            self.refresh_target()
        start, stop = inputs["rows"]
        losses = self.peers.mean(torch.stack(step_losses), samples=stop - start)
        td_errors = self.peers.all_rows(torch.stack(step_td_errors), rows=(start, stop), total=self.batch_size)
        return {"td_errors": td_errors.cpu().numpy(), "losses": losses}

    def minibatch_loss(self, obs, actions, rewards, next_obs, discounts, weights):
        """The loss of one minibatch, its TD errors and Q-values (what algo.compile compiles)."""
        with torch.no_grad():
            next_online = self.model(next_obs) if self.double_q else None
            targets = q_targets(rewards, discounts, self.target_model(next_obs), next_online)
        q_taken = self.model(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        td_errors = targets - q_taken
        return weighted_huber(td_errors, weights), td_errors, q_taken

    def sequence_loss(self, weights, **sequences):
        """A minibatch of sequences: the loss, each sequence's priority (in place of a TD error)
        and the Q-values of the trained steps."""
        return sequence_q_loss(
            model=self.model,
            target_model=self.target_model,
            **sequences,
            weights=weights,
            burn_in=self.burn_in,
            n=self.n_step,
            gamma=self.gamma,
            double_q=self.double_q,
        )

    def refresh_target(self) -> None:
        if self.tau < 1.0:
            polyak(self.target_model, self.model, self.tau)
        elif self.gradient_steps % self.target_update_every == 0:
            self.target_model.load_state_dict(self.model.state_dict())

    def state_dict(self) -> dict:
        return {**super().state_dict(), "target_model": self.target_model.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.target_model.load_state_dict(state["target_model"])


class DQN(ReplayLearner):
    """One iteration: act ε-greedily with the newest weights, the rollout into the replay, the
    replay ratio's minibatches learned by its learner (rlpar.algos.replay_learner), weights out."""

    Config = DQNConfig
    learner_class: type[DQNLearner] = DQNLearner
    learner: DQNLearner
    loss_names = ("loss_q", "td_error_mean", "q_mean")
    model_kind = "q_network"
    action_spaces = ("Discrete",)
    data_parallel = True
    recurrent_policies = True

    def __init__(self, config: DQNConfig, *, sampler, policy_spec, total_steps: int, seed: int, device: str = "cpu"):
        """`burn_in`, `sequence_length`: a recurrent Q-network's replayed sequences (else unused)."""
        self.recurrent = policy_spec.recurrent is not None
        self.burn_in, self.sequence_length = config.burn_in, config.sequence_length
        super().__init__(
            config,
            sampler=sampler,
            policy_spec=policy_spec,
            total_steps=total_steps,
            seed=seed,
            device=device,
            steps_per_item=config.sequence_length // 2 if self.recurrent else 1,
        )
        self.epsilon_start, self.epsilon_end, self.exploration_steps = (
            config.epsilon_start,
            config.epsilon_end,
            config.exploration_steps,
        )

    def build_replay(self) -> None:
        """Transitions (ReplayLearner's), or a recurrent Q-network's sequences."""
        if not self.recurrent:
            return super().build_replay()
        spec = self.policy_spec
        self.use_replay(
            sequence_fields(
                obs_dim=spec.obs_dim,
                obs_dtype=spec.obs_dtype,
                state_size=spec.state_size,
                burn_in=self.burn_in,
                length=self.sequence_length,
            ),
            SequenceWriter(burn_in=self.burn_in, length=self.sequence_length),
        )

    # -- acting -----------------------------------------------------------------------------
    def epsilon(self) -> float:
        return (
            linear_schedule(
                self.epsilon_start - self.epsilon_end,
                steps_seen=self.steps_seen,
                total_steps=self.exploration_steps,
                min_fraction=0.0,
            )
            + self.epsilon_end
        )

    def get_weights(self) -> dict:
        return {**super().get_weights(), "epsilon": np.float64(self.epsilon())}

    def exploration_metrics(self) -> dict:
        return {"epsilon": self.epsilon()}

    def writer_extras(self, batch) -> dict:
        return {"states": batch.states} if self.recurrent else {}
