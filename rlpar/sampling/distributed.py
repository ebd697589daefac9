"""`parallel=distributed`: Ray actors (env runners) on any node of a Ray cluster.

Each env runner owns `envs_per_worker` environments and a numpy copy of the policy (no torch, so
actors start fast). Weights go into the object store once per round and every runner reads the
same object; batches come back as numpy arrays (zero-copy out of the object store). Runners ask
for a fraction of a CPU (`hardware.ray.cpus_per_worker`), so 16 of them fit on a 2-core laptop,
and are spread over the cluster's nodes.
"""

from __future__ import annotations

import time

from rlpar.sampling.batch import Batch
from rlpar.sampling.pool import WorkerPoolSampler
from rlpar.sampling.rollout import RolloutWorker


class EnvRunner:
    """The actor body: a RolloutWorker plus the identity of the node it runs on."""

    def __init__(self, **worker_kwargs):
        self.worker = RolloutWorker(**worker_kwargs)

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

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
        rollout_length, seed, sync_mode, max_policy_lag)."""
        super().__init__(**pool_kwargs)
        from rlpar.runtime.ray_runtime import RayConnection

        self.connection = RayConnection(address=ray_address, num_cpus=ray_num_cpus, object_store_mb=object_store_mb)
        ray = self.ray = self.connection.ray
        runner_cls = ray.remote(EnvRunner).options(num_cpus=cpus_per_worker, scheduling_strategy="SPREAD")
        self.runners = [runner_cls.remote(**self.worker_kwargs(w)) for w in range(self.num_workers)]
        # Not waited for here: runners boot while the learner and logger are being built.
        self._node_id_refs = [r.node_id.remote() for r in self.runners]
        self.node_ids: list[str] | None = None
        self.pending: dict = {}  # object ref -> worker index
        self.sent_version = [None] * self.num_workers
        self._weights_ref, self._weights_version = None, None

    def _submit(self, worker: int, weights: dict, version: int) -> None:
        start = time.perf_counter()
        if self._weights_version != version:
            self._weights_ref, self._weights_version = self.ray.put(weights), version
        fresh = self.sent_version[worker] != version
        ref = self.runners[worker].sample.remote(self._weights_ref if fresh else None, version)
        self.sent_version[worker] = version
        self.pending[ref] = worker
        self._sync_s += time.perf_counter() - start

    def _wait(self, workers: set[int], timeout: float | None) -> list[tuple[int, Batch]]:
        refs = [ref for ref, w in self.pending.items() if w in workers]
        ready, rest = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if rest:
            more, _ = self.ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        start = time.perf_counter()
        batches = self.ray.get(ready)
        self._transfer_s += time.perf_counter() - start
        return [(self.pending.pop(ref), batch) for ref, batch in zip(ready, batches)]

    def num_nodes(self) -> int:
        if self.node_ids is None:
            self.node_ids = self.ray.get(self._node_id_refs)
        return len(set(self.node_ids))

    def close(self) -> None:
        for runner in getattr(self, "runners", []):
            try:
                self.ray.kill(runner)
            except Exception:
                pass
        self.runners = []
        if hasattr(self, "connection"):
            self.connection.shutdown()
