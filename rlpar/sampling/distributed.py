"""`parallel=distributed`: Ray actors (env runners) on any node of a Ray cluster.

Each env runner owns `envs_per_worker` environments and a numpy copy of the policy (no torch, so
actors start fast). Weights go into the object store once per round and every runner reads the
same object; batches come back as numpy arrays (zero-copy out of the object store). Runners ask
for a fraction of a CPU (`hardware.ray.cpus_per_worker`), so 16 of them fit on a 2-core laptop,
and are spread over the cluster's nodes.
"""

from __future__ import annotations

import os
import time

from rlpar.sampling.batch import Batch
from rlpar.sampling.errors import WorkerFailure
from rlpar.sampling.pool import WorkerPoolSampler


class EnvRunner:
    """The actor body: a worker (sampling.base.Worker) plus where it runs (node and process)."""

    def __init__(self, worker_class, **worker_kwargs):
        self.worker = worker_class(**worker_kwargs)

    def location(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def sample(self, weights: dict | None, version: int) -> Batch:
        if weights is not None:
            self.worker.set_weights(weights, version)
        return self.worker.sample()


class DistributedSampler(WorkerPoolSampler):
    def __init__(
        self,
        *,
        ray_address: str | None = None,
        ray_num_cpus: float | None = None,
        cpus_per_worker: float = 0.1,
        object_store_mb: int = 256,
        **pool_kwargs,
    ):
        """`pool_kwargs`: WorkerPoolSampler's (env_spec, policy_spec, num_workers, envs_per_worker,
        rollout_length, seed, sync_mode, max_policy_lag and the failure limits)."""
        super().__init__(**pool_kwargs)
        from rlpar.cluster.connection import RayConnection

        self.connection = RayConnection(address=ray_address, num_cpus=ray_num_cpus, object_store_mb=object_store_mb)
        ray = self.ray = self.connection.ray
        # Spread over the nodes; a replacement goes wherever capacity exists, and one that finds
        # none waits, without holding up training, until a node joins. No task events: the GCS
        # keeps up to 100,000 of them (RAY_task_events_max_num_task_in_gcs), and at hundreds of
        # sample() calls a second they grew its memory by ~50 MB a minute (docs/benchmarks.md, Soak).
        self.runner_cls = ray.remote(EnvRunner).options(
            num_cpus=cpus_per_worker, scheduling_strategy="SPREAD", enable_task_events=False
        )
        self.runners: list = [None] * self.num_workers
        self.locations: list[tuple[str, int] | None] = [None] * self.num_workers
        self.location_refs: dict = {}  # object ref -> starting worker
        self.pending: dict = {}  # object ref -> worker index
        self._weights_ref, self._weights_version = None, None
        # Not waited for here: runners boot while the learner and logger are being built.
        self.start_workers()

    def _launch(self, worker: int) -> None:
        self.runners[worker] = self.runner_cls.remote(self.worker_class, **self.worker_kwargs(worker))
        self.locations[worker] = None
        self.location_refs[self.runners[worker].location.remote()] = worker

    def _ready(self, workers: set[int], timeout: float) -> list[tuple[int, WorkerFailure | None]]:
        answered = []
        for ref in self._finished(self.location_refs, workers, timeout):
            worker = self.location_refs.pop(ref)
            result = self._get(ref)
            if not isinstance(result, WorkerFailure):
                self.locations[worker], result = result, None
            answered.append((worker, result))
        return answered

    def _send(self, worker: int, weights: dict | None, version: int) -> None:
        if weights is not None and self._weights_version != version:
            self._weights_ref, self._weights_version = self.ray.put(weights), version
        ref = self.runners[worker].sample.remote(self._weights_ref if weights is not None else None, version)
        self.pending[ref] = worker

    def _wait(self, workers: set[int], timeout: float | None) -> list[tuple[int, Batch | WorkerFailure]]:
        ready = self._finished(self.pending, workers, timeout)
        start = time.perf_counter()
        results = [(self.pending.pop(ref), self._get(ref)) for ref in ready]
        self._transfer_s += time.perf_counter() - start
        return results

    def _finished(self, requests: dict, workers: set[int], timeout: float | None) -> list:
        """Every finished ref of `requests` (ref -> worker) made to `workers`, after waiting up
        to `timeout` for the first."""
        refs = [ref for ref, worker in requests.items() if worker in workers]
        if not refs:
            return []
        ready, rest = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def _get(self, ref):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as err:  # actor died, node lost, or the runner raised
            return WorkerFailure(_describe(err))

    def _stop(self, worker: int) -> None:
        for refs in (self.pending, self.location_refs):
            for ref in [r for r, w in refs.items() if w == worker]:
                del refs[ref]
        try:
            self.ray.kill(self.runners[worker])
        except Exception:
            pass  # already gone with its node
        self.runners[worker] = None

    def worker_pids(self) -> list[int | None]:
        return [loc[1] if loc else None for loc in self.locations]

    def num_nodes(self) -> int:
        return len({self.locations[w][0] for w in self.live if self.locations[w]})

    def close(self) -> None:
        for worker, runner in enumerate(getattr(self, "runners", [])):
            if runner is not None:
                self._stop(worker)
        if hasattr(self, "connection"):
            self.connection.shutdown()


def _describe(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]
