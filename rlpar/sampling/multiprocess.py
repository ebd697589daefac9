"""`parallel=multiprocess`: one machine, worker subprocesses writing rollouts into shared memory.

Each worker steps `envs_per_worker` environments with its own numpy copy of the policy
(inference in the workers: measured faster here than batching inference in the learner, which
would add a round trip per environment step; see docs/benchmarks.md). Observations, actions,
rewards and flags go straight into shared-memory arrays laid out as the whole batch, worker i
owning columns [i*E, (i+1)*E); only episode statistics travel through the pipe. Workers are
forked before the learner exists and use numpy and Gymnasium only, never torch; `spawn`
(`parallel.start_method=spawn`) also works but needs an `if __name__ == "__main__":` guard
in scripts that build a sampler. With `inference=central` workers only step environments and a
thread of the learner's process acts for all of them (rlpar.sampling.inference).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
import traceback
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any

import numpy as np

from rlpar.errors import EnvironmentFailedError
from rlpar.sampling.batch import PER_ENV_FIELDS, Batch
from rlpar.sampling.errors import WorkerFailure
from rlpar.sampling.inference import SharedMemoryInference
from rlpar.sampling.pool import WorkerPoolConfig, WorkerPoolSampler
from rlpar.sampling.services import InProcessService, Service, built_here
from rlpar.sampling.shared_arrays import attach_shared_arrays, create_shared_arrays, release_shared_arrays
from rlpar.typed_config import choice


def _columns(arrays: dict[str, np.ndarray], cols: slice) -> dict[str, Any]:  # Batch(**...)'s arrays
    return {k: (v[cols] if k in PER_ENV_FIELDS else v[:, cols]) for k, v in arrays.items()}


def _worker_main(conn, parent_end, names, layout, cols, worker_class, worker_kwargs):
    """Subprocess loop: wait for a request, roll out into shared memory, report statistics."""
    # A forked child holds a copy of the trainer's end of its pipe: close it, so that the trainer's
    # death (even by SIGKILL) reaches this worker as end-of-file and it exits instead of lingering.
    parent_end.close()
    # Ctrl-C in a terminal (or SIGTERM to the process group) reaches every worker too; stopping
    # them is the trainer's job, done once it has finished its iteration and checkpointed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    blocks = []
    try:
        blocks, arrays = attach_shared_arrays(names, layout)
        out = _columns(arrays, cols)
        worker = worker_class(**worker_kwargs)
        conn.send(("ready", None))
        while True:
            message = conn.recv()
            if message[0] == "close":
                break
            _, weights, version = message
            if weights is not None:
                worker.set_weights(weights, version)
            batch = worker.sample(out=out)
            conn.send(("done", batch.details()))  # the arrays are in shared memory already
        worker.close()
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except EnvironmentFailedError as err:
        try:
            conn.send(("stops_run", str(err)))
        except Exception:
            pass
    except Exception:
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass
    finally:
        for block in blocks:
            block.close()


@dataclass(frozen=True, kw_only=True)
class MultiprocessConfig(WorkerPoolConfig):
    start_method: str = choice("fork", ("fork", "spawn", "forkserver"))


class MultiprocessSampler(WorkerPoolSampler):
    Config = MultiprocessConfig

    @classmethod
    def worker_process_kind(cls, config) -> str | None:
        return "multiprocess"

    def __init__(
        self,
        *,
        name: str = "multiprocess",
        start_method: str = "fork",
        **pool_kwargs,
    ):
        """`pool_kwargs`: WorkerPoolSampler's (env_spec, policy_spec, num_workers, envs_per_worker,
        rollout_length, seed, sync_mode, max_policy_lag and the failure limits)."""
        super().__init__(name=name, **pool_kwargs)
        self.layout = self.worker_class.batch_layout(self.policy_spec, self.rollout_length, self.num_envs)
        self.blocks, self.arrays = create_shared_arrays(self.layout)
        self.block_names = {key: block.name for key, block in self.blocks.items()}
        self.context: Any = mp.get_context(start_method)  # a fork, forkserver or spawn context
        self.conns: list = [None] * self.num_workers
        self.processes: list = [None] * self.num_workers
        self.inference: SharedMemoryInference | None = None
        self.inference_version: int | None = None
        try:
            if self.central_inference:
                self.inference = SharedMemoryInference(
                    policy_spec=self.policy_spec,
                    num_envs=self.num_envs,
                    worker_envs=self.worker_envs,
                    **self.inference_options,
                )
            self.start_workers()
        except BaseException:
            self.close()
            raise

    def _columns_of(self, worker: int) -> slice:
        return slice(worker * self.worker_envs, (worker + 1) * self.worker_envs)

    def _launch(self, worker: int) -> None:
        parent, child = self.context.Pipe()
        kwargs = self.worker_kwargs(worker)
        proc = self.context.Process(
            target=_worker_main,
            args=(child, parent, self.block_names, self.layout, self._columns_of(worker), self.worker_class, kwargs),
            daemon=True,
            name=f"rlpar-worker-{worker}",
        )
        proc.start()
        child.close()
        if "inference" in kwargs:
            kwargs["inference"].release()
        self.conns[worker], self.processes[worker] = parent, proc

    def _inference_client(self, worker: int):
        assert self.inference is not None  # called with central inference only
        return self.inference.client(worker, self.context)

    def _set_inference_weights(self, weights: dict, version: int) -> None:
        assert self.inference is not None
        if version != self.inference_version:
            self.inference.set_weights(weights)
            self.inference_version = version

    def _inference_metrics(self) -> dict:
        assert self.inference is not None
        return self.inference.metrics()

    def _receive(self, worker: int, kind: str):
        """The worker's next message if it is `kind`, else a WorkerFailure saying what happened."""
        try:
            message = self.conns[worker].recv()
        except (EOFError, OSError):
            proc = self.processes[worker]
            proc.join(1.0)
            return WorkerFailure(f"process {proc.pid} died (exit code {proc.exitcode})")
        if message[0] == "error":
            return WorkerFailure(f"raised {message[1].strip().splitlines()[-1]}")
        if message[0] == "stops_run":
            return WorkerFailure(message[1], stops_run=EnvironmentFailedError(message[1]))
        if message[0] != kind:
            return WorkerFailure(f"sent {message[0]!r} instead of {kind!r}")
        return message[1]

    def _answers(self, workers: set[int], timeout: float | None, kind: str) -> list[tuple[int, Any]]:
        """(worker, payload or WorkerFailure) of each of `workers` that has sent something,
        after waiting up to `timeout` for the first."""
        by_conn = {self.conns[w]: w for w in workers}
        return [(by_conn[conn], self._receive(by_conn[conn], kind)) for conn in connection.wait(list(by_conn), timeout)]

    def _ready(self, workers: set[int], timeout: float) -> list[tuple[int, WorkerFailure | None]]:
        return [(w, r if isinstance(r, WorkerFailure) else None) for w, r in self._answers(workers, timeout, "ready")]

    def _send(self, worker: int, weights: dict | None, version: int) -> None:
        try:
            self.conns[worker].send(("sample", weights, version))
        except (BrokenPipeError, OSError):
            pass  # it died: the next wait reads end-of-file and replaces it

    def _wait(self, workers: set[int], timeout: float | None) -> list[tuple[int, Batch | WorkerFailure]]:
        results = []
        for worker, result in self._answers(workers, timeout, "done"):
            if not isinstance(result, WorkerFailure):
                result = Batch(**_columns(self.arrays, self._columns_of(worker)), **result)
            results.append((worker, result))
        return results

    def _stop(self, worker: int) -> None:
        proc, conn = self.processes[worker], self.conns[worker]
        if proc is not None and proc.is_alive():
            proc.kill()
        if proc is not None:
            proc.join(5.0)
        if conn is not None:
            conn.close()

    def _assemble_all(self, results: dict[int, Batch]) -> Batch:
        """Workers wrote their columns of the shared arrays: the whole batch is already in place."""
        start = time.perf_counter()
        merged = Batch.concat([results[w] for w in range(self.num_workers)], arrays=dict(self.arrays))
        self._transfer_s += time.perf_counter() - start
        return merged

    def _own(self, batch: Batch) -> Batch:
        """The worker's next rollout overwrites its columns of shared memory: keep a copy."""
        return batch.copy()

    def begin(self, weights: dict, version: int) -> None:
        """Nothing yet: a blocking round's batch is the shared arrays themselves, which the
        learner still reads until it asks for the next one (Sampler.begin)."""

    def worker_pids(self) -> list[int | None]:
        return [proc.pid if proc is not None else None for proc in self.processes]

    def start_service(
        self,
        service_class,
        *,
        name: str,
        settings: dict,
        in_shared_memory=None,
        node_index: int | None = None,
        on_lost=None,
    ) -> Service:
        """In the learner's process; in shared memory, which the workers reach in place
        (Hogwild), when the algorithm says how to build it there; else out of the workers'
        reach (they send their data back with the batch)."""
        if in_shared_memory is None:
            start, reachable = built_here(service_class, settings), False
        else:
            start, reachable = in_shared_memory, True
        return self.keep_service(
            InProcessService(start=start, reachable=reachable, shared=reachable, name=name, on_lost=on_lost)
        )

    def close(self) -> None:
        self.stop_services()
        if (
            inference := getattr(self, "inference", None)
        ) is not None:  # first: a worker waiting for actions then reads end-of-file
            inference.close()
            self.inference = None
        live = [(c, p) for c, p in zip(getattr(self, "conns", []), getattr(self, "processes", [])) if c is not None]
        for conn, _ in live:
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 5.0
        for conn, proc in live:
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
            conn.close()
        self.conns, self.processes = [None] * self.num_workers, [None] * self.num_workers
        release_shared_arrays(getattr(self, "blocks", {}))
        self.blocks = {}
