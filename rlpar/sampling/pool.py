"""What the multiprocess and Ray samplers share: rounds over a pool of workers that may fail.

`sync_mode=blocking`: every live worker samples with the newest weights and the learner waits for
all of them (strictly on-policy; worker i's environments are columns [i*E, (i+1)*E) of the batch,
exactly as if one process had stepped them all).

`sync_mode=non_blocking`: every live worker always has a request in flight, so sampling continues
while the learner updates. A round takes whatever batches are ready, drops those whose policy
version lags the learner's by more than `max_policy_lag` (None: none), and immediately hands each returning
worker the newest weights.

Failures: a worker that dies, raises, or does not answer within `sample_timeout_s` is stopped and
replaced by a fresh one (new environment seeds), which gets the newest weights on its first
request. Its rollout is dropped, never partly used; the round goes on with the healthy workers.
Replacements start in the background and join a later round once they answer (on a Ray cluster
they wait for capacity, e.g. a node that joins later). The run stops with `WorkerPoolError` after
more than `max_worker_restarts` replacements of failed workers (a worker lost with its cluster
node is no failure), when fewer than `min_live_workers` are up for
`start_timeout_s`, or at once when starting fails again and again: `START_ATTEMPTS` times in a
row for one worker, or that often in all before any worker came up.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlpar.interrupts import stop_requested
from rlpar.sampling.base import Sampler, SamplerConfig
from rlpar.sampling.batch import Batch
from rlpar.sampling.errors import WorkerFailure, WorkerPoolError
from rlpar.sampling.rollout import RolloutWorker
from rlpar.selfplay.pool import OPPONENT_POOL_KEY, without_held_snapshots
from rlpar.typed_config import choice, integer, number

log = logging.getLogger("rlpar")

START_ATTEMPTS = 3  # failed starts that show a worker cannot start (a cancelled actor, an env that cannot be built)
WAIT_SLICE_S = 0.25  # a wait for workers to start looks up this often whether a signal asked to stop


@dataclass(frozen=True, kw_only=True)
class WorkerPoolConfig(SamplerConfig):
    """A pool's failure limits and central inference, besides every sampler's keys."""

    max_worker_restarts: int | None = integer(100, low=0, optional=True)
    sample_timeout_s: float | None = number(60.0, low=0, low_open=True, optional=True)
    start_timeout_s: float | None = number(300.0, low=0, low_open=True, optional=True)
    min_live_workers: int | None = integer(1, low=1, optional=True)
    inference_wait_ms: float | None = number(0.2, low=0, optional=True)
    inference_backend: str | None = choice("auto", ("auto", "numpy", "torch"), optional=True)


class WorkerPoolSampler(Sampler):
    Config: type = WorkerPoolConfig

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """At least min_live_workers workers, besides every sampler's rules."""
        problems = super().config_problems(config)
        min_live, workers = config.get("parallel.min_live_workers"), config.get("workers")
        if isinstance(min_live, int) and isinstance(workers, int) and min_live > workers >= 1:
            problems.append(f"parallel.min_live_workers: {min_live} is more than workers ({workers})")
        return problems

    def __init__(
        self,
        *,
        name: str,
        env_spec,
        policy_spec,
        num_workers: int,
        envs_per_worker: int,
        rollout_length: int,
        seed: int,
        sync_mode: str = "blocking",
        max_policy_lag: int | None = 1,
        max_worker_restarts: int = 100,
        sample_timeout_s: float = 60.0,
        start_timeout_s: float = 300.0,
        min_live_workers: int = 1,
        worker_class=RolloutWorker,
        worker_options: dict | None = None,
        inference: str = "worker",
        inference_wait_ms: float = 0.2,
        inference_backend: str = "auto",
        inference_device: str = "cpu",
    ):
        """`worker_class` (sampling.base.Worker) is what each worker process or actor runs, with
        `worker_options` added to its arguments (what the algorithm's worker class needs).
        `inference=central`: workers only step environments and a server on the learner's side
        acts for all of them (rlpar.sampling.inference), on `inference_device` with
        `inference_backend` (auto: numpy on a CPU, torch on a GPU); it waits up to
        `inference_wait_ms` for the other workers' requests before answering those it has."""
        self.name = name  # the parallel group's option
        self.env_spec, self.policy_spec, self.worker_class = env_spec, policy_spec, worker_class
        self.worker_options = dict(worker_options or {})
        self.rollout_length, self.seed = rollout_length, seed
        self.num_workers = num_workers
        self.worker_envs = envs_per_worker
        self.num_envs = num_workers * envs_per_worker
        self.sync_mode = sync_mode
        self.max_policy_lag = max_policy_lag
        self.max_worker_restarts = max_worker_restarts
        self.sample_timeout_s = sample_timeout_s
        self.start_timeout_s = start_timeout_s
        self.min_live_workers = min_live_workers
        self.live: set[int] = set()
        self.starting: set[int] = set()
        self.booting: set[int] = set()  # first start of the pool: rounds wait for all of these
        self.in_flight: dict[int, float] = {}  # worker -> deadline of its request
        self.sent_version: list[int | None] = [None] * num_workers
        # per worker: the opponent pool's snapshots it holds (env.opponent=pool), each sent once
        self.held_snapshots: list[frozenset] = [frozenset()] * num_workers
        self.generation = [0] * num_workers  # replacements of each worker so far
        self.failed_starts = [0] * num_workers  # of each worker since it was last up
        self.any_worker_up = False
        self.worker_restarts = 0
        self.node_loss_restarts = 0  # of worker_restarts: workers whose node left (not failures)
        self.env_restarts = 0
        self.dropped_batches = 0
        self.last_failure = ""
        self._metrics: dict = {}
        self._begun_sync_s = 0.0  # weight sync of a round begun before its `sample`
        self.central_inference = inference == "central"
        self.inference_options: dict[str, Any] = {
            "wait_ms": inference_wait_ms,
            "device": inference_device,
            "backend": None if inference_backend == "auto" else inference_backend,
        }

    def worker_kwargs(self, worker: int) -> dict:
        """The worker class's arguments for worker `worker`: it owns environments [w*E, (w+1)*E)."""
        return dict(
            env_spec=self.env_spec,
            policy_spec=self.policy_spec,
            num_envs=self.worker_envs,
            rollout_length=self.rollout_length,
            seed=self.seed,
            first_env_index=worker * self.worker_envs,
            generation=self.generation[worker],
            **self.worker_options,
            **({"inference": self._inference_client(worker)} if self.central_inference else {}),
        )

    def start_workers(self) -> None:
        """Launch every worker; called by subclasses once they can launch one."""
        for worker in range(self.num_workers):
            self._launch(worker)
        self.starting = set(range(self.num_workers))
        self.booting = set(self.starting)

    # -- what a concrete pool provides ------------------------------------------------------
    @abstractmethod
    def _launch(self, worker: int) -> None:
        """Start worker `worker` (with `worker_kwargs(worker)`) without waiting for it."""

    @abstractmethod
    def _ready(self, workers: set[int], timeout: float) -> list[tuple[int, WorkerFailure | None]]:
        """Starting workers that have come up (None) or failed to, waiting up to `timeout`."""

    @abstractmethod
    def _send(self, worker: int, weights: dict | None, version: int) -> None:
        """Start an asynchronous rollout; `weights` is None when the worker already has them."""

    @abstractmethod
    def _wait(self, workers: set[int], timeout: float | None) -> list[tuple[int, Batch | WorkerFailure]]:
        """Every finished request of `workers`, after waiting up to `timeout` for the first."""

    @abstractmethod
    def _stop(self, worker: int) -> None:
        """Kill worker `worker` for good (it failed or hangs)."""

    def _inference_client(self, worker: int):
        """Worker `worker`'s end of the central inference server (parallel.inference=central);
        asked once per launch of the worker (a replacement gets a fresh one)."""
        raise NotImplementedError(f"{type(self).__name__} has no central inference")

    def _set_inference_weights(self, weights: dict, version: int) -> None:
        """Give the central inference server the newest weights."""

    def _inference_metrics(self) -> dict:
        """The central inference server's batches and busy time since the last call."""
        return {}

    def _own(self, batch: Batch) -> Batch:
        """A batch that stays valid once its worker samples again (by default it already is)."""
        return batch

    def _assemble_all(self, results: dict[int, Batch]) -> Batch:
        """Batch of a blocking round in which every worker answered, in worker order."""
        return Batch.concat([results[w] for w in range(self.num_workers)])

    # -- failures ---------------------------------------------------------------------------
    def _replace(self, worker: int, failure: WorkerFailure) -> None:
        if failure.stops_run is not None:
            raise failure.stops_run
        self.worker_restarts += 1
        self.last_failure = f"worker {worker}: {failure.reason}"
        if self._lost_with_its_node(worker):  # no fault of the worker's: not counted toward the limit
            self.node_loss_restarts += 1
            log.warning("%s (its node left the cluster); replacing it", self.last_failure)
            self._relaunch(worker)
            return
        failures = self.worker_restarts - self.node_loss_restarts
        if failures > self.max_worker_restarts:
            raise WorkerPoolError(
                f"{failures} worker failures, more than parallel.max_worker_restarts="
                f"{self.max_worker_restarts}; last: {self.last_failure}"
            )
        log.warning(
            "%s; replacing it (restart %d of at most %d)", self.last_failure, failures, self.max_worker_restarts
        )
        self._relaunch(worker)

    def _relaunch(self, worker: int, **launch_options) -> None:
        """Stop worker `worker` and start a fresh one in its place (new environment seeds; its
        rollout in flight is dropped); it joins a later round once it answers."""
        self.live.discard(worker)
        self.booting.discard(worker)
        self.in_flight.pop(worker, None)
        self._stop(worker)
        self.generation[worker] += 1
        self.sent_version[worker] = None
        self.held_snapshots[worker] = frozenset()
        self._launch(worker, **launch_options)
        self.starting.add(worker)

    def _lost_with_its_node(self, worker: int) -> bool:
        """Whether worker `worker` died because the machine it ran on left (a cluster's node)."""
        return False

    def _check_start_failure(self, worker: int, failure: WorkerFailure) -> None:
        """A worker that failed before it ever came up is started again once, twice; more, and
        the cause is no passing trouble (a cluster that cancels every actor, an environment no
        worker can build): the run stops within seconds, not after max_worker_restarts launches."""
        self.failed_starts[worker] += 1
        failed = sum(self.failed_starts)
        if self.failed_starts[worker] >= START_ATTEMPTS:
            raise WorkerPoolError(
                f"worker {worker} failed to start {self.failed_starts[worker]} times in a row; last: {failure.reason}"
            )
        if not self.any_worker_up and failed >= START_ATTEMPTS:
            raise WorkerPoolError(
                f"no worker could start ({failed} starts failed, none came up); last: worker {worker}: {failure.reason}"
            )

    def _admit_started(self) -> None:
        """Move workers that came up into the live set; wait when the pool is booting or too small."""
        deadline = time.monotonic() + self.start_timeout_s
        while self.starting:
            must_wait = bool(self.booting) or len(self.live) < self.min_live_workers
            timeout = max(deadline - time.monotonic(), 0.0) if must_wait else 0.0
            answered = self._ready(set(self.starting), min(timeout, WAIT_SLICE_S))
            for worker, failure in answered:
                self.starting.discard(worker)
                self.booting.discard(worker)
                if failure is None:
                    self.live.add(worker)
                    self.failed_starts[worker], self.any_worker_up = 0, True
                else:
                    self._check_start_failure(worker, failure)
                    self._replace(worker, failure)
            if not must_wait or (not answered and time.monotonic() >= deadline):
                break
            if stop_requested():  # hundreds of workers may take minutes to boot: not waited for
                raise KeyboardInterrupt
        self.booting.clear()
        if len(self.live) < self.min_live_workers:
            raise WorkerPoolError(
                f"only {len(self.live)} of {self.num_workers} workers are up after waiting "
                f"{self.start_timeout_s:.0f} s (parallel.min_live_workers={self.min_live_workers})"
                + (f"; last failure: {self.last_failure}" if self.last_failure else "")
            )

    def _submit(self, worker: int, weights: dict, version: int) -> None:
        start = time.perf_counter()
        fresh = self.sent_version[worker] != version
        if fresh and self.central_inference:
            # the server acts: the worker learns the version it now samples with, and the opponent
            # pool where one rides along (its snapshots act on the worker: rlpar.selfplay.pool)
            weights = {k: v for k, v in weights.items() if k == OPPONENT_POOL_KEY}
        if fresh:
            weights, self.held_snapshots[worker] = without_held_snapshots(weights, self.held_snapshots[worker])
        self._send(worker, weights if fresh else None, version)
        self.sent_version[worker] = version
        self.in_flight[worker] = time.monotonic() + self.sample_timeout_s
        self._sync_s += time.perf_counter() - start

    def _collect(self) -> list[tuple[int, Batch]]:
        """Finished rollouts of in-flight workers; failed and timed-out workers are replaced."""
        deadline = min(self.in_flight.values())
        finished = self._wait(set(self.in_flight), max(deadline - time.monotonic(), 0.0))
        batches = []
        for worker, result in finished:
            self.in_flight.pop(worker, None)
            if isinstance(result, WorkerFailure):
                self._replace(worker, result)
            else:
                self.env_restarts += result.env_restarts
                batches.append((worker, result))
        now = time.monotonic()
        for worker, worker_deadline in list(self.in_flight.items()):
            if worker_deadline <= now:
                self._replace(
                    worker, WorkerFailure(f"no rollout within {self.sample_timeout_s:g} s (parallel.sample_timeout_s)")
                )
        return batches

    # -- rounds -----------------------------------------------------------------------------
    def begin(self, weights: dict, version: int) -> None:
        """Blocking rounds: every live worker starts sampling with `weights` now, and the next
        `sample(weights, version)` collects what they return (non-blocking rounds: nothing, the
        workers already sample on)."""
        if self.sync_mode != "blocking" or self.in_flight:
            return
        start = time.perf_counter()
        self._sync_s = 0.0
        self._admit_started()
        if self.central_inference:
            self._set_inference_weights(weights, version)
        for worker in sorted(self.live):
            self._submit(worker, weights, version)
        self._begun_sync_s = time.perf_counter() - start

    def sample(self, weights: dict, version: int) -> Batch:
        start = time.perf_counter()
        self._sync_s, self._begun_sync_s = self._begun_sync_s, 0.0  # a begun round's sync counts here
        self._transfer_s = 0.0
        batch = None
        while batch is None:  # a round whose every worker failed is repeated with the replacements
            self._admit_started()
            if self.central_inference:
                synced = time.perf_counter()
                self._set_inference_weights(weights, version)
                self._sync_s += time.perf_counter() - synced
            if self.sync_mode == "blocking":
                batch = self._blocking_round(weights, version)
            else:
                batch = self._non_blocking_round(weights, version)
        lags = [version - v for v in batch.policy_versions] or [0]
        self._metrics = {
            "time_sample_s": time.perf_counter() - start - self._sync_s - self._transfer_s,
            "time_transfer_s": self._transfer_s,
            "time_weight_sync_s": self._sync_s,
            "policy_lag_min": min(lags),
            "policy_lag_mean": float(np.mean(lags)),
            "policy_lag_max": max(lags),
            "dropped_batches": self.dropped_batches,
            "batches_this_iter": len(batch.policy_versions),
            **(self._inference_metrics() if self.central_inference else {}),
        }
        return batch

    def _blocking_round(self, weights: dict, version: int) -> Batch | None:
        assert all(self.sent_version[w] == version for w in self.in_flight), "a begun round of other weights"
        for worker in sorted(self.live - set(self.in_flight)):  # (in flight: begun)
            self._submit(worker, weights, version)
        results: dict[int, Batch] = {}
        while self.in_flight:
            results.update(self._collect())
        if not results:
            return None
        if len(results) == self.num_workers:
            return self._assemble_all(results)
        return Batch.concat([results[w] for w in sorted(results)])  # failed workers' columns left out

    def _non_blocking_round(self, weights: dict, version: int) -> Batch | None:
        accepted: list[tuple[int, Batch]] = []
        while True:
            for worker in sorted(self.live - set(self.in_flight)):
                self._submit(worker, weights, version)  # returning workers sample on at once
            if accepted or not self.in_flight:
                break
            for worker, batch in self._collect():
                if self.max_policy_lag is not None and version - batch.policy_version > self.max_policy_lag:
                    self.dropped_batches += 1
                else:
                    accepted.append((worker, self._own(batch)))
        if not accepted:
            return None
        accepted.sort(key=lambda item: item[0])
        return Batch.concat([batch for _, batch in accepted])

    def metrics(self) -> dict:
        return {
            **self._metrics,
            "live_workers": len(self.live),
            "worker_restarts": self.worker_restarts,
            "node_loss_restarts": self.node_loss_restarts,
            "env_restarts": self.env_restarts,
            "num_nodes": self.num_nodes(),
        }

    def num_nodes(self) -> int:
        return 1

    def state_dict(self) -> dict:
        """Counters only: remote environments are not captured, so resumes start them afresh."""
        return {
            "worker_restarts": self.worker_restarts,
            "node_loss_restarts": self.node_loss_restarts,
            "env_restarts": self.env_restarts,
        }

    def load_state_dict(self, state: dict, *, environments: bool = True) -> None:
        self.worker_restarts = int(state.get("worker_restarts", 0))
        self.node_loss_restarts = int(state.get("node_loss_restarts", 0))
        self.env_restarts = int(state.get("env_restarts", 0))
