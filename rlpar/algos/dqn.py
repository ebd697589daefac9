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

import numpy as np
import torch

from rlpar.algos.replay_learner import ReplayLearner, as_tensor
from rlpar.learning.losses.q_targets import q_targets, weighted_huber
from rlpar.learning.losses.r2d2 import sequence_q_loss
from rlpar.learning.optimization.compiled import COMPILE_SWITCH_STEP, compile_setting, gradient_step
from rlpar.learning.optimization.optim import adam, polyak
from rlpar.learning.optimization.step import LearningRate, linear_schedule
from rlpar.replay.sequences import SequenceWriter, sequence_fields
from rlpar.replay.settings import ReplaySettings


class DQN(ReplayLearner):
    loss_names = ("loss_q", "td_error_mean", "q_mean")
    model_kind = "q_network"
    action_spaces = ("Discrete",)
    data_parallel = True
    input_layout = "rows"  # each learner learns contiguous rows of every minibatch
    recurrent_policies = True

    def __init__(
        self,
        *,
        sampler,
        policy_spec,
        total_steps: int,
        seed: int,
        device: str = "cpu",
        lr: float = 1e-4,
        anneal_lr: bool = False,
        min_lr_fraction: float = 0.0,
        gamma: float = 0.99,
        n_step: int = 1,
        batch_size: int = 64,
        replay_ratio: float = 0.25,
        learning_starts: int = 1000,
        target_update_every: int = 250,
        tau: float = 1.0,
        double_q: bool = True,
        epsilon_start: float = 1.0,
        epsilon_end: float = 0.05,
        exploration_steps: int = 10_000,
        weight_sync_interval: int = 1,
        max_grad_norm: float = 10.0,
        replay: ReplaySettings | None = None,
        reward_scale: float = 1.0,
        reward_clip: float | None = None,
        max_consecutive_nonfinite: int = 20,
        compile: str | bool = "auto",
        compile_switch: int | str = COMPILE_SWITCH_STEP,
        precision: str = "fp32",
        burn_in: int = 8,
        sequence_length: int = 16,
    ):
        """`compile`: the whole minibatch step with torch.compile (rlpar.learning.optimization.compiled),
        used from gradient step `compile_switch` on (or `ready`: as soon as it is compiled);
        `burn_in`, `sequence_length`: a recurrent Q-network's replayed sequences (else unused)."""
        self.recurrent = policy_spec.recurrent is not None
        self.burn_in, self.sequence_length = burn_in, sequence_length
        super().__init__(
            sampler=sampler,
            policy_spec=policy_spec,
            total_steps=total_steps,
            seed=seed,
            device=device,
            gamma=gamma,
            n_step=n_step,
            batch_size=batch_size,
            replay_ratio=replay_ratio,
            learning_starts=learning_starts,
            weight_sync_interval=weight_sync_interval,
            replay=replay,
            reward_scale=reward_scale,
            reward_clip=reward_clip,
            steps_per_item=sequence_length // 2 if self.recurrent else 1,
        )
        self.set_optimizer(
            adam(self.parameters, lr=lr, eps=1e-5),
            max_grad_norm=max_grad_norm,
            max_consecutive_nonfinite=max_consecutive_nonfinite,
            precision=precision,
        )
        self.lr = LearningRate(lr, anneal_lr, min_lr_fraction)
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.target_update_every, self.tau, self.double_q = target_update_every, tau, double_q
        self.epsilon_start, self.epsilon_end, self.exploration_steps = epsilon_start, epsilon_end, exploration_steps
        self.compiled = compile_setting(
            compile,
            expected_gradient_steps=int(replay_ratio * total_steps),
            precision=precision,
            recurrent=self.recurrent,
            images=policy_spec.has_images,
        )
        loss = self.sequence_loss if self.recurrent else self.minibatch_loss
        self.gradient_step = gradient_step(
            loss, model=self.model, guard=self.step, compiled=self.compiled, switch=compile_switch
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

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**super().state_dict(), "target_model": self.target_model.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.target_model.load_state_dict(state["target_model"])
