"""`parallel=multiprocess`: one machine, worker subprocesses writing rollouts into shared memory.

Each worker steps `envs_per_worker` environments with its own numpy copy of the policy
(inference in the workers: measured faster here than batching inference in the learner, which
would add a round trip per environment step; see docs/benchmarks.md). Observations, actions,
rewards and flags go straight into shared-memory arrays laid out as the whole batch, worker i
owning columns [i*E, (i+1)*E); only episode statistics travel through the pipe. Workers are
forked before the learner exists and use numpy and Gymnasium only, never torch; `spawn`
(`parallel.start_method=spawn`) also works but needs an `if __name__ == "__main__":` guard
in scripts that build a sampler.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from multiprocessing import connection, shared_memory

import numpy as np

from rlpar.sampling.batch import Batch, batch_layout
from rlpar.sampling.pool import WorkerPoolSampler
from rlpar.sampling.rollout import RolloutWorker

START_TIMEOUT_S = 120.0


def _attach(names: dict, layout: dict) -> tuple[list, dict[str, np.ndarray]]:
    blocks, arrays = [], {}
    for key, (shape, dtype) in layout.items():
        block = shared_memory.SharedMemory(name=names[key])
        blocks.append(block)
        arrays[key] = np.ndarray(shape, dtype=dtype, buffer=block.buf)
    return blocks, arrays


def _columns(arrays: dict[str, np.ndarray], cols: slice) -> dict[str, np.ndarray]:
    return {k: (v[cols] if k == "bootstrap_value" else v[:, cols]) for k, v in arrays.items()}


def _worker_main(conn, names, layout, cols, worker_kwargs):
    """Subprocess loop: wait for a request, roll out into shared memory, report statistics."""
    blocks = []
    try:
        blocks, arrays = _attach(names, layout)
        out = _columns(arrays, cols)
        worker = RolloutWorker(**worker_kwargs)
        conn.send(("ready", None))
        while True:
            message = conn.recv()
            if message[0] == "close":
                break
            _, weights, version = message
            if weights is not None:
                worker.set_weights(weights, version)
            batch = worker.sample(out=out)
            conn.send(("done", (batch.episode_returns, batch.episode_lengths, batch.raw_obs_sums, version)))
        worker.close()
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except Exception:
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass
    finally:
        for block in blocks:
            block.close()


class MultiprocessSampler(WorkerPoolSampler):
    def __init__(
        self,
        *,
        start_method: str = "fork",
        **pool_kwargs,
    ):
        """`pool_kwargs`: WorkerPoolSampler's (env_spec, policy_spec, num_workers, envs_per_worker,
        rollout_length, seed, sync_mode, max_policy_lag)."""
        super().__init__(**pool_kwargs)
        self.layout = batch_layout(self.policy_spec, self.rollout_length, self.num_envs)
        self.blocks = {
            key: shared_memory.SharedMemory(create=True, size=max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1))
            for key, (shape, dtype) in self.layout.items()
        }
        self.arrays = {
            key: np.ndarray(shape, dtype=dtype, buffer=self.blocks[key].buf) for key, (shape, dtype) in self.layout.items()
        }
        names = {key: block.name for key, block in self.blocks.items()}
        context = mp.get_context(start_method)
        self.conns, self.processes, self.sent_version = [], [], [None] * self.num_workers
        self.episode_stats: dict[int, tuple] = {}
        try:
            for w in range(self.num_workers):
                parent, child = context.Pipe()
                cols = slice(w * self.envs_per_worker, (w + 1) * self.envs_per_worker)
                proc = context.Process(
                    target=_worker_main,
                    args=(child, names, self.layout, cols, self.worker_kwargs(w)),
                    daemon=True,
                    name=f"rlpar-worker-{w}",
                )
                proc.start()
                child.close()
                self.conns.append(parent)
                self.processes.append(proc)
            for w in range(self.num_workers):
                self._expect(w, "ready", START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def _expect(self, worker: int, kind: str, timeout: float | None):
        conn = self.conns[worker]
        if timeout is not None and not conn.poll(timeout):
            raise RuntimeError(f"multiprocess worker {worker} did not answer within {timeout:.0f} s")
        try:
            message = conn.recv()
        except EOFError as err:
            raise RuntimeError(f"multiprocess worker {worker} died (exit code {self.processes[worker].exitcode})") from err
        if message[0] == "error":
            raise RuntimeError(f"multiprocess worker {worker} failed:\n{message[1]}")
        if message[0] != kind:
            raise RuntimeError(f"multiprocess worker {worker} sent {message[0]!r}, expected {kind!r}")
        return message[1]

    def _submit(self, worker: int, weights: dict, version: int) -> None:
        start = time.perf_counter()
        fresh = self.sent_version[worker] != version
        self.conns[worker].send(("sample", weights if fresh else None, version))
        self.sent_version[worker] = version
        self._sync_s += time.perf_counter() - start

    def _wait(self, workers: set[int], timeout: float | None) -> list[tuple[int, Batch]]:
        by_conn = {self.conns[w]: w for w in workers}
        ready = connection.wait(list(by_conn), timeout)
        results = []
        for conn in ready:
            worker = by_conn[conn]
            returns, lengths, moments, version = self._expect(worker, "done", None)
            cols = slice(worker * self.envs_per_worker, (worker + 1) * self.envs_per_worker)
            views = _columns(self.arrays, cols)
            results.append((worker, Batch(**views, episode_returns=returns, episode_lengths=lengths,
                                          raw_obs_sums=moments, policy_versions=[version])))
        return results

    def _assemble_all(self, results: dict[int, Batch]) -> Batch:
        """Workers wrote their columns of the shared arrays: the whole batch is already in place."""
        start = time.perf_counter()
        merged = Batch.concat([results[w] for w in range(self.num_workers)], arrays=dict(self.arrays))
        self._transfer_s += time.perf_counter() - start
        return merged

    def _own(self, batch: Batch) -> Batch:
        """The worker's next rollout overwrites its columns of shared memory: keep a copy."""
        return batch.copy()

    def close(self) -> None:
        for conn in getattr(self, "conns", []):
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + 5.0
        for proc in getattr(self, "processes", []):
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for conn in getattr(self, "conns", []):
            conn.close()
        self.conns, self.processes = [], []
        for block in getattr(self, "blocks", {}).values():
            block.close()
            try:
                block.unlink()
            except FileNotFoundError:
                pass
        self.blocks = {}

