"""What the multiprocess and Ray samplers share: rounds over a pool of workers.

`sync_mode=blocking`: every worker samples with the newest weights and the learner waits for all
of them (strictly on-policy; worker i's environments are columns [i*E, (i+1)*E) of the batch,
exactly as if one process had stepped them all).

`sync_mode=non_blocking`: every worker always has a request in flight, so sampling continues while
the learner updates. A round takes whatever batches are ready, drops those whose policy version
lags the learner's by more than `max_policy_lag`, and immediately hands each returning worker the
newest weights.
"""

from __future__ import annotations

import time
from abc import abstractmethod

import numpy as np

from rlpar.sampling.base import Sampler
from rlpar.sampling.batch import Batch


class WorkerPoolSampler(Sampler):
    def __init__(
        self,
        *,
        env_spec,
        policy_spec,
        num_workers: int,
        envs_per_worker: int,
        rollout_length: int,
        seed: int,
        sync_mode: str = "blocking",
        max_policy_lag: int = 1,
    ):
        self.env_spec, self.policy_spec = env_spec, policy_spec
        self.rollout_length, self.seed = rollout_length, seed
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.num_envs = num_workers * envs_per_worker
        self.sync_mode = sync_mode
        self.max_policy_lag = max_policy_lag
        self.in_flight: set[int] = set()
        self.dropped_batches = 0
        self._metrics: dict = {}

    def worker_kwargs(self, worker: int) -> dict:
        """RolloutWorker arguments for worker `worker`: it owns environments [w*E, (w+1)*E)."""
        return dict(
            env_spec=self.env_spec,
            policy_spec=self.policy_spec,
            num_envs=self.envs_per_worker,
            rollout_length=self.rollout_length,
            seed=self.seed,
            first_env_index=worker * self.envs_per_worker,
        )

    # -- what a concrete pool provides ------------------------------------------------------
    @abstractmethod
    def _submit(self, worker: int, weights: dict, version: int) -> None:
        """Start an asynchronous rollout on `worker` with these weights."""

    @abstractmethod
    def _wait(self, workers: set[int], timeout: float | None) -> list[tuple[int, Batch]]:
        """Block until at least one of `workers` has finished; return every finished one."""

    def _own(self, batch: Batch) -> Batch:
        """A batch that stays valid once its worker samples again (by default it already is)."""
        return batch

    def _assemble_all(self, results: dict[int, Batch]) -> Batch:
        """Batch of a full blocking round, workers in index order."""
        return Batch.concat([results[w] for w in range(self.num_workers)])

    # -- rounds -----------------------------------------------------------------------------
    def sample(self, weights: dict, version: int) -> Batch:
        start = time.perf_counter()
        self._sync_s = 0.0
        self._transfer_s = 0.0
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
        }
        return batch

    def _blocking_round(self, weights: dict, version: int) -> Batch:
        for worker in range(self.num_workers):
            self._submit(worker, weights, version)
            self.in_flight.add(worker)
        results: dict[int, Batch] = {}
        while self.in_flight:
            for worker, batch in self._wait(set(self.in_flight), None):
                self.in_flight.discard(worker)
                results[worker] = batch
        return self._assemble_all(results)

    def _non_blocking_round(self, weights: dict, version: int) -> Batch:
        for worker in range(self.num_workers):
            if worker not in self.in_flight:
                self._submit(worker, weights, version)
                self.in_flight.add(worker)
        accepted: list[tuple[int, Batch]] = []
        while not accepted:
            for worker, batch in self._wait(set(self.in_flight), None):
                self.in_flight.discard(worker)
                if version - batch.policy_version > self.max_policy_lag:
                    self.dropped_batches += 1
                else:
                    accepted.append((worker, self._own(batch)))
                self._submit(worker, weights, version)
                self.in_flight.add(worker)
        accepted.sort(key=lambda item: item[0])
        return Batch.concat([batch for _, batch in accepted])

    def metrics(self) -> dict:
        return {**self._metrics, "live_workers": self.num_workers, "num_nodes": self.num_nodes()}

    def num_nodes(self) -> int:
        return 1
