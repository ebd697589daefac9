"""Asynchronous advantage actor-critic (A3C; Mnih et al. 2016): workers compute gradients on their
own n-step rollouts and a parameter server applies each as it arrives.

One iteration: take the rollouts that have arrived (`non_blocking`: a worker samples on as soon
as it has the newest weights) -> each worker has applied its gradient of A2C's objective
(rlpar.learning.losses.actor_critic) on the parameter server itself, which records how many versions
stale each was, and taken the newest weights back -> the learner keeps the books.

The sampler starts the parameter server where its layout puts it (rlpar.sampling.services) and
the workers reach it through its address:
- parallel=distributed: a Ray actor `ParameterServer`. The learner takes a copy of its state
  every `server_sync_interval` iterations; a server that dies is restarted from that copy (at
  most one interval of updates is lost), counted in `parameter_server_restarts`, and the workers
  get the new address with the next weights.
- parallel=multiprocess: parameters and optimiser statistics in shared memory, which every
  worker process updates in place without locks (Hogwild, as in the paper;
  rlpar.learning.optimization.hogwild). The learner's model is that shared model.
- parallel=local: in the learner's process, one worker, one gradient per iteration, applied
  before the next rollout: synchronous, and then exactly A2C with the same hyper-parameters.
Except with shared memory, the server owns the weights and the optimiser; the learner's own
(A2C's) model and optimiser are only the initial ones.

A recurrent policy (`model.recurrent`): each worker's gradient is over its rollout as one
sequence per environment, unrolled from the state stored at the rollout's start, reset at
episode ends (rlpar.learning.losses.actor_critic); async n-step Q does the same with its Q-networks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlpar.algos.a2c import A2C, A2CConfig
from rlpar.algos.base import StepResult
from rlpar.learning.losses.actor_critic import ActorCriticLoss
from rlpar.learning.optimization.hogwild import SharedParameters
from rlpar.learning.optimization.parameter_server import ParameterServer
from rlpar.sampling.gradient_worker import GradientWorker
from rlpar.typed_config import integer, override

OBJECTIVE_KEYS = ("gamma", "advantage", "n_steps", "gae_lambda", "value_coef", "entropy_coef", "normalize_advantages")


@dataclass(frozen=True, kw_only=True)
class A3CConfig(A2CConfig):
    """A2C's keys and the parameter server's. Workers compute the loss on raw rewards (clipped,
    x reward_scale): no shared running statistics, so normalize_rewards is fixed off."""

    server_sync_interval: int = integer(10, low=1)  # iterations between copies of a remote server's state
    normalize_rewards: bool | str = override(A2CConfig, "normalize_rewards", False, fixed=True)


class A3C(A2C):
    sync_mode = "non_blocking"
    max_policy_lag = None
    worker_class = GradientWorker
    central_inference = False
    data_parallel = False
    not_data_parallel_because = (
        "does not learn in one place that can be split (its workers or a parameter server make the gradients)"
    )
    recurrent_policies = True  # each worker's gradient over its rollout in sequence, from the stored start state
    worker_duties = "compute gradients"
    target_update_every: int | None = None  # a target network on the server (asynchronous Q-learning)
    Config = A3CConfig
    # The workers' forward and backward run in bf16 (their gradients are float32); fp16 would need
    # a loss scaler in every worker, kept in step with the server's skips.
    precisions = ("fp32", "bf16")

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        return {
            "objective": ActorCriticLoss(**{k: algo_config[k] for k in OBJECTIVE_KEYS}),
            "reward_scale": algo_config["reward_scale"],
            "reward_clip": algo_config.get("reward_clip"),
            "precision": algo_config.get("precision", "fp32"),
        }

    def __init__(self, config: A3CConfig, **built):
        """`config`: A2C's hyper-parameters (the workers take the objective's from the config,
        see `worker_options`) and the parameter server's; `built`: what the builder passes every
        algorithm (sampler, policy_spec, total_steps, seed, device)."""
        super().__init__(config, **built)
        self.server_sync_interval = config.server_sync_interval
        self.iterations = 0
        settings = dict(
            policy_spec=self.policy_spec,
            total_steps=self.total_steps,
            seed=built["seed"],
            max_grad_norm=self.learner.step.max_grad_norm,
            max_consecutive_nonfinite=self.learner.step.max_consecutive_nonfinite,
            learning_rate=self.learner.lr,
            optimizer=self.learner.optimizer_settings,
            target_update_every=self.target_update_every,
        )
        self.server = self.sampler.start_service(
            ParameterServer,
            name="parameter server",
            settings=settings,
            in_shared_memory=self.share,
            on_lost=self.restart_state,
        )
        self.server.keep()

    # -- the parameter server ---------------------------------------------------------------
    def share(self, state: dict | None) -> SharedParameters:
        """The server where workers share the learner's memory (Hogwild): the learner's model and
        optimiser, moved to shared memory."""
        return SharedParameters(
            model=self.model,
            optimizer=self.learner.optimizer,
            learning_rate=self.learner.lr,
            total_steps=self.total_steps,
            max_grad_norm=self.learner.step.max_grad_norm,
            max_consecutive_nonfinite=self.learner.step.max_consecutive_nonfinite,
            target_update_every=self.target_update_every,
            state=state,
        )

    def restart_state(self, kept: dict) -> dict:
        """A lost server restarts from the newest copy kept, its version moved past every
        version handed out, so staleness stays non-negative."""
        self.version += 1
        return {**kept, "version": self.version}

    def get_weights(self) -> dict:
        """What workers are sent: the server's address (they apply their gradients there and
        take its newest weights); with `acting`, what their acting policy takes beside them."""
        acting = self.acting_options()
        return {"parameter_server": self.server.address, **({"acting": acting} if acting else {})}

    def acting_options(self) -> dict:
        return {}

    def policy_weights(self) -> dict:
        answer = self.server.call("weights")
        if answer is None:  # lost (and restarted): the newest copy kept
            return {k: v.detach().cpu().numpy() for k, v in self.server.state()["model"].items()}
        return answer[0]

    def sampler_version(self) -> int:
        """Workers that share the server's memory read its newest weights themselves: they are
        sent its address once per start (so policy lag says nothing there; staleness does)."""
        return self.server.generation if self.server.shared else self.version

    # -- one iteration ----------------------------------------------------------------------
    def training_step(self) -> StepResult:
        # A rollout from every worker, on average (one metrics row per rollout would be a lot).
        batch, metrics = self.sample(min_rollouts=self.sampler.num_rollout_workers)
        self.steps_seen += batch.num_steps
        self.iterations += 1
        answers = self.workers_reports(batch)
        self.keep_server(batch)
        if self.server.shared:
            metrics = {k: v for k, v in metrics.items() if not k.startswith("policy_lag")}  # see sampler_version
        staleness = [a["staleness"] for a in answers]
        metrics.update(
            gradients_applied=len(answers), parameter_server_restarts=self.server.restarts, policy_version=self.version
        )
        if staleness:
            metrics.update(
                gradient_staleness_min=min(staleness),
                gradient_staleness_mean=float(np.mean(staleness)),
                gradient_staleness_max=max(staleness),
                nonfinite_updates=answers[-1]["nonfinite_updates"],
            )
        losses = batch.extras.get("loss", [])
        if losses:
            metrics.update({k: float(np.mean([loss[k] for loss in losses])) for k in losses[0]})
        metrics["lr"] = self.learner.lr.value(steps_seen=self.steps_seen, total_steps=self.total_steps)
        return StepResult(batch.num_steps, *self.reported_episodes(batch), metrics)

    def reported_episodes(self, batch) -> tuple[list, list]:
        """Returns and lengths of the episodes the run's statistics count: all of them."""
        return batch.episode_returns, batch.episode_lengths

    def workers_reports(self, batch) -> list[dict]:
        """What the workers that applied their gradients report."""
        staleness, nonfinite = batch.extras.get("staleness", []), batch.extras.get("nonfinite_updates", [])
        return [{"staleness": s, "nonfinite_updates": n} for s, n in zip(staleness, nonfinite)]

    def keep_server(self, batch) -> None:
        """The newest version the workers saw; a server a worker found dead restarted from the
        newest copy of its state; every server_sync_interval iterations a new copy."""
        versions = batch.extras.get("server_version", [])
        if versions:
            self.version = max(self.version, max(versions))
        for generation in batch.extras.get("server_lost", []):
            self.server.report_lost(generation)
        if self.iterations % self.server_sync_interval == 0:
            self.server.keep()

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The server's state: where it shares the learner's memory or process, current (read
        while workers may be writing it); elsewhere, the newest copy kept (at most
        server_sync_interval iterations old)."""
        return {
            "server": self.server.state(),
            "steps_seen": self.steps_seen,
            "version": self.version,
            "server_restarts": self.server.restarts,
        }

    def load_state_dict(self, state: dict) -> None:
        state = _from_hogwild_layout(state)
        self.steps_seen, self.version = int(state["steps_seen"]), int(state["version"])
        self.server.restart(state=state["server"])
        self.server.restarts = int(state["server_restarts"])  # a resume is not a failure


def _from_hogwild_layout(state: dict) -> dict:
    """A multiprocess checkpoint written before the parameter server became the sampler's service
    held the learner's model, optimiser and shared counters at the top level: still resumable."""
    if "shared_counters" not in state:
        return state
    version, env_steps = (int(count) for count in state["shared_counters"])
    server = {"model": state["model"], "optimizer": state["optimizer"], "version": version, "env_steps": env_steps}
    return {"server": server, "steps_seen": state["steps_seen"], "version": version, "server_restarts": 0}
