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
- parallel=multiprocess: parameters and optimiser statistics in shared memory, which every
  worker process updates in place without locks (Hogwild, as in the paper;
  rlpar.learning.hogwild). The learner's model is that shared model.
- parallel=local: in the learner's process, one worker, one gradient per iteration, applied
  before the next rollout: synchronous, and then exactly A2C with the same hyper-parameters.
Except with shared memory, the server owns the weights and the optimiser; the learner's own
(A2C's) model and optimiser are only the initial ones.
"""

from __future__ import annotations

import numpy as np

from rlpar.algos.a2c import A2C
from rlpar.algos.base import StepResult
from rlpar.learning.actor_critic import ActorCriticLoss
from rlpar.sampling.gradient_worker import GradientWorker
from rlpar.learning.hogwild import SharedParameters
from rlpar.learning.parameter_server import ParameterServer
from rlpar.sampling.multiprocess import MultiprocessSampler

OBJECTIVE_KEYS = ("gamma", "advantage", "n_steps", "gae_lambda", "value_coef", "entropy_coef", "normalize_advantages")


class A3C(A2C):
    sync_mode = "non_blocking"
    max_policy_lag = None
    worker_class = GradientWorker
    central_inference = False
    worker_duties = "compute gradients"
    target_update_every: int | None = None  # a target network on the server (asynchronous Q-learning)
    # Workers compute the loss on raw rewards (clipped, x reward_scale): no shared running statistics.
    KEYWORDS_NOT_FORWARDED = ("normalize_rewards",)

    @classmethod
    def worker_options(cls, algo_config: dict) -> dict:
        return {"objective": ActorCriticLoss(**{k: algo_config[k] for k in OBJECTIVE_KEYS}),
                "reward_scale": algo_config["reward_scale"], "reward_clip": algo_config.get("reward_clip")}

    def __init__(self, *, server_sync_interval: int = 10, **a2c_kwargs):
        """`a2c_kwargs`: A2C's hyper-parameters (the workers take the objective's from the config,
        see `worker_options`); `server_sync_interval`: iterations between copies of a Ray
        parameter server's state into the learner (for checkpoints and restarts)."""
        super().__init__(**a2c_kwargs)
        self.server_settings = dict(
            policy_spec=self.policy_spec, total_steps=self.total_steps, seed=a2c_kwargs["seed"],
            max_grad_norm=self.step.max_grad_norm, max_consecutive_nonfinite=self.step.max_consecutive_nonfinite,
            learning_rate=self.lr, optimizer=self.optimizer_settings, target_update_every=self.target_update_every)
        self.server_sync_interval = server_sync_interval
        self.ray = getattr(self.sampler, "ray", None)  # a Ray sampler: the server is an actor
        self.hogwild = isinstance(self.sampler, MultiprocessSampler)
        self.server_generation = 0
        self.server_restarts = 0
        self.iterations = 0
        if self.hogwild:
            self.shared = self.share()
        else:
            self.server = self.start_server(state=None)
        if self.ray is not None:
            self.held = self.server_state()  # the newest copy of the Ray server's state

    # -- the parameter server ---------------------------------------------------------------
    def share(self) -> SharedParameters:
        """parallel=multiprocess: the learner's model and optimiser, moved to shared memory."""
        settings = self.server_settings
        return SharedParameters(model=self.model, optimizer=self.optimizer, learning_rate=self.lr,
                                total_steps=self.total_steps, max_grad_norm=settings["max_grad_norm"],
                                max_consecutive_nonfinite=settings["max_consecutive_nonfinite"],
                                target_update_every=self.target_update_every)

    def start_server(self, *, state: dict | None):
        if self.ray is None:
            return ParameterServer(**self.server_settings, state=state)
        return self.ray.remote(ParameterServer).options(num_cpus=0).remote(**self.server_settings, state=state)

    def server_state(self) -> dict | None:
        """The Ray server's state (None when it does not answer: it is restarted)."""
        try:
            return self.ray.get(self.server.state.remote(), timeout=60)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            return None

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
        """What workers are sent: the shared parameters, the Ray server's handle, or (local) the
        server's weights; with `acting`, what their acting policy takes beside the weights."""
        if self.hogwild:
            weights = {"hogwild": self.shared}
        elif self.ray is None:
            weights = self.server.weights()[0]
        else:
            weights = {"parameter_server": self.server, "server_generation": self.server_generation}
        acting = self.acting_options()
        return {**weights, "acting": acting} if acting else weights

    def acting_options(self) -> dict:
        return {}

    def policy_weights(self) -> dict:
        if self.hogwild:
            return self.shared.weights()[0]
        if self.ray is None:
            return self.server.weights()[0]
        try:
            return self.ray.get(self.server.weights.remote(), timeout=60)[0]
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            return {k: v.detach().cpu().numpy() for k, v in self.held["model"].items()}  # the newest copy

    def sampler_version(self) -> int:
        """Shared-memory workers read the newest weights themselves: they are sent the shared
        parameters once (so policy lag says nothing here; staleness does)."""
        return 0 if self.hogwild else self.version

    # -- one iteration ----------------------------------------------------------------------
    def training_step(self) -> StepResult:
        # A rollout from every worker, on average (one metrics row per rollout would be a lot).
        batch, metrics = self.sample(min_rollouts=self.sampler.num_rollout_workers)
        self.steps_seen += batch.num_steps
        self.iterations += 1
        if self.ray is not None:
            self.keep_server(batch)
        elif self.hogwild:
            self.version = self.shared.version
            metrics = {k: v for k, v in metrics.items() if not k.startswith("policy_lag")}  # see sampler_version
        answers = self.workers_reports(batch) if self.hogwild or self.ray is not None else self.apply_here(batch)
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
        return StepResult(batch.num_steps, *self.reported_episodes(batch), metrics)

    def reported_episodes(self, batch) -> tuple[list, list]:
        """Returns and lengths of the episodes the run's statistics count: all of them."""
        return batch.episode_returns, batch.episode_lengths

    def apply_here(self, batch) -> list[dict]:
        """Each rollout's gradient, in worker order, on the in-process server."""
        answers = []
        rollouts = zip(batch.extras["gradients"], batch.policy_versions, batch.extras["obs_moments"],
                       self.rollout_steps(batch))
        for gradients, version, moments, steps in rollouts:
            answers.append(self.server.apply(gradients, version, steps, moments))
        self.version = self.server.version
        return answers

    def rollout_steps(self, batch) -> list[int]:
        """Env steps of each contributing worker's rollout (they are equal: same envs, same T)."""
        count = len(batch.policy_versions)
        return [batch.num_steps // count] * count

    def keep_server(self, batch) -> None:
        """Ray: the newest version the workers saw; every server_sync_interval iterations a copy
        of the server's state; a lost server restarted from the newest copy."""
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
        if lost:
            self.restart_server()

    def workers_reports(self, batch) -> list[dict]:
        """What the workers that applied their gradients themselves report."""
        staleness, nonfinite = batch.extras.get("staleness", []), batch.extras.get("nonfinite_updates", [])
        return [{"staleness": s, "nonfinite_updates": n} for s, n in zip(staleness, nonfinite)]

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The server's state: in this process, current; with Ray, the newest copy held (at most
        server_sync_interval iterations old); in shared memory, read while workers may be
        writing it."""
        if self.hogwild:
            self.version = self.shared.version
            return {**super().state_dict(), "shared_counters": self.shared.counters.clone()}
        server = self.server.state() if self.ray is None else self.held
        return {"server": server, "steps_seen": self.steps_seen, "version": self.version,
                "server_restarts": self.server_restarts}

    def load_state_dict(self, state: dict) -> None:
        if self.hogwild:
            super().load_state_dict(state)  # the optimiser's state arrives in new tensors:
            self.shared = self.share()  # shared again before any worker is sent them
            self.shared.counters.copy_(state["shared_counters"])
            return
        self.steps_seen, self.server_restarts = int(state["steps_seen"]), int(state["server_restarts"])
        self.version = int(state["version"])
        if self.ray is None:
            self.server.load_state(state["server"])
            return
        self.held = state["server"]
        self.restart_server()
        self.server_restarts -= 1  # a resume is not a failure

    def close(self) -> None:
        if self.ray is not None:
            try:
                self.ray.kill(self.server)
            except Exception:
                pass
        super().close()
