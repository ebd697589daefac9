"""Asynchronous advantage actor-critic (A3C; Mnih et al. 2016): workers compute gradients on their
own n-step rollouts and a parameter server applies each as it arrives.

One iteration: take the rollouts that have arrived (`non_blocking`: a worker samples on as soon
as it has the newest weights) -> each carries its worker's gradient of A2C's objective
(rlpar.learning.actor_critic) -> the parameter server applies them, one at a time, recording
how many versions stale each was -> the newest weights go to the workers.

Where the parameter server runs:
- parallel=distributed: a Ray actor `ParameterServer`; each worker applies its gradient there
  itself and takes the newest weights straight back, so the learner only keeps the books and
  fetches the server's state every `server_sync_interval` iterations. A server that dies is
  restarted from that state (at most one interval of updates is lost), counted in
  `parameter_server_restarts`, and the workers get the new handle with the next weights.
- parallel=multiprocess: in the learner's process; gradients come back with the rollouts.
- parallel=local: the same, one worker, one gradient per iteration: synchronous, and then
  exactly A2C with the same hyper-parameters.
"""

from __future__ import annotations

import numpy as np

from rlpar.algos.a2c import A2C
from rlpar.algos.base import StepResult
from rlpar.learning.actor_critic import ActorCriticLoss
from rlpar.learning.gradient_worker import GradientWorker
from rlpar.learning.parameter_server import ParameterServer

OBJECTIVE_KEYS = ("gamma", "advantage", "n_steps", "gae_lambda", "value_coef", "entropy_coef", "normalize_advantages")


class A3C(A2C):
    sync_mode = "non_blocking"
    max_policy_lag = None
    worker_class = GradientWorker
    # Workers compute the loss on raw rewards (x reward_scale): no shared running statistics.
    KEYWORDS_NOT_FORWARDED = ("normalize_rewards",)

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        return {"objective": ActorCriticLoss(**{k: algo_config[k] for k in OBJECTIVE_KEYS}),
                "reward_scale": algo_config["reward_scale"]}

    def __init__(self, *, server_sync_interval: int = 10, **a2c_kwargs):
        """`a2c_kwargs`: A2C's hyper-parameters (the workers take the objective's from the config,
        see `worker_options`); `server_sync_interval`: iterations between copies of a Ray
        parameter server's state into the learner (for checkpoints and restarts)."""
        super().__init__(**a2c_kwargs)
        self.server_settings = dict(
            policy_spec=self.policy_spec, total_steps=self.total_steps, seed=a2c_kwargs["seed"],
            max_grad_norm=self.step.max_grad_norm, max_consecutive_nonfinite=self.step.max_consecutive_nonfinite,
            learning_rate=self.lr, optimizer=self.optimizer_settings)
        self.server_sync_interval = server_sync_interval
        self.ray = getattr(self.sampler, "ray", None)  # a Ray sampler: the server is an actor
        self.server_generation = 0
        self.server_restarts = 0
        self.iterations = 0
        self.server = self.start_server(state=None)
        self.held = self.server_state()  # the newest server state the learner holds
        self.mirror(self.held)

    # -- the parameter server ---------------------------------------------------------------
    def start_server(self, *, state: dict | None):
        if self.ray is None:
            return ParameterServer(**self.server_settings, state=state)
        return self.ray.remote(ParameterServer).options(num_cpus=0).remote(**self.server_settings, state=state)

    def server_state(self) -> dict | None:
        """The server's state (None when a Ray server does not answer: it is restarted)."""
        if self.ray is None:
            return self.server.state()
        try:
            return self.ray.get(self.server.state.remote(), timeout=60)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            return None

    def mirror(self, state: dict) -> None:
        """The learner's model takes the server's weights (what get_weights hands out)."""
        self.model.load_state_dict(state["model"])
        self.version = int(state["version"])

    def restart_server(self) -> None:
        """From the newest state held, its version moved past every version handed out, so
        staleness stays non-negative."""
        try:
            self.ray.kill(self.server)
        except Exception:
            pass  # already gone
        state = {**self.held, "version": self.version + 1}
        self.server = self.start_server(state=state)
        self.server_generation += 1
        self.server_restarts += 1
        self.held = state
        self.version = state["version"]

    def get_weights(self) -> dict:
        if self.ray is None:
            return super().get_weights()
        return {"parameter_server": self.server, "server_generation": self.server_generation}

    # -- one iteration ----------------------------------------------------------------------
    def training_step(self) -> StepResult:
        batch, metrics = self.sample()
        self.steps_seen += batch.num_steps
        self.iterations += 1
        if self.ray is None:
            answers = self.apply_here(batch)
        else:
            answers = self.applied_remotely(batch)
        staleness = [a["staleness"] for a in answers]
        metrics.update(gradients_applied=len(answers), parameter_server_restarts=self.server_restarts,
                       policy_version=self.version)
        if staleness:
            metrics.update(gradient_staleness_min=min(staleness), gradient_staleness_mean=float(np.mean(staleness)),
                           gradient_staleness_max=max(staleness), nonfinite_updates=answers[-1]["nonfinite_updates"])
        losses = batch.extras.get("loss", [])
        if losses:
            metrics.update({k: float(np.mean([loss[k] for loss in losses])) for k in losses[0]})
        metrics["lr"] = self.lr.value(steps_seen=self.steps_seen, total_steps=self.total_steps)
        return StepResult(batch.num_steps, batch.episode_returns, batch.episode_lengths, metrics)

    def apply_here(self, batch) -> list[dict]:
        """Each rollout's gradient, in worker order, on the in-process server."""
        answers = []
        rollouts = zip(batch.extras["gradients"], batch.policy_versions, batch.extras["obs_moments"],
                       self.rollout_steps(batch))
        for gradients, version, moments, steps in rollouts:
            answers.append(self.server.apply(gradients, version, steps, moments))
        if answers:
            self.held = self.server_state()
            self.mirror(self.held)
        return answers

    def rollout_steps(self, batch) -> list[int]:
        """Env steps of each contributing worker's rollout (they are equal: same envs, same T)."""
        count = len(batch.policy_versions)
        return [batch.num_steps // count] * count

    def applied_remotely(self, batch) -> list[dict]:
        """The workers applied their gradients themselves: read what they report; keep a copy
        of the server's state every server_sync_interval iterations; restart a lost server."""
        lost = [g for g in batch.extras.get("server_lost", []) if g == self.server_generation]
        versions = batch.extras.get("server_version", [])
        if versions:
            self.version = max(self.version, max(versions))
        if not lost and self.iterations % self.server_sync_interval == 0:
            state = self.server_state()
            if state is None:
                lost = [self.server_generation]
            else:
                self.held = state
                self.model.load_state_dict(state["model"])
        if lost:
            self.restart_server()
        answers = batch.extras.get("staleness", [])
        finite = batch.extras.get("nonfinite_updates", [])
        return [{"staleness": s, "nonfinite_updates": n} for s, n in zip(answers, finite)]

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The newest server state the learner holds (with Ray: at most server_sync_interval
        iterations old)."""
        return {"server": self.held, "steps_seen": self.steps_seen, "version": self.version,
                "server_restarts": self.server_restarts}

    def load_state_dict(self, state: dict) -> None:
        self.steps_seen, self.server_restarts = int(state["steps_seen"]), int(state["server_restarts"])
        self.held = state["server"]
        self.version = int(state["version"])
        if self.ray is None:
            self.server.load_state(self.held)
        else:
            self.restart_server()
            self.server_restarts -= 1  # a resume is not a failure
        self.mirror(self.held)

    def close(self) -> None:
        if self.ray is not None:
            try:
                self.ray.kill(self.server)
            except Exception:
                pass
        super().close()
