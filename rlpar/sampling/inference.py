"""SEED-style central inference (`parallel.inference=central`, Espeholt et al. 2019).

Workers only step environments. Every step each worker hands its raw observations (and the
per-environment noise it draws from its own generators, so actions are the same as with
worker-side inference) to one inference server on the learner's side, which batches them across
workers, runs the policy once and returns normalised observations, actions, log-probabilities
and values. The server runs the same numpy maths as the workers on a CPU, so a run's first batch
is bit-for-bit the local one; with `hardware=gpu` it runs the torch module on CUDA and chooses
actions from its outputs with the same numpy code.

Transports:
- `parallel=multiprocess`: request and reply arrays for every environment in shared memory; a
  worker writes its rows and rings a doorbell (one byte through a pipe, never pickled); a thread of
  the learner's process waits for doorbells, answers all ringing workers with one forward pass and
  rings back.
- `parallel=distributed`: a Ray actor (`InferenceServer`) on the learner's node; each env runner
  sends its observations with one call per step, and the actor answers the calls that arrive
  together (all live runners, or whoever came within `wait_ms`) with one forward pass.

A recurrent policy's states stay on the server, one per environment row of the run; a request
says per row where the entering state comes from, and the reply's next state keeps the worker's
own array a mirror of the server's (rlpar.sampling.inference_states).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from multiprocessing import connection
from typing import Any

import numpy as np

from rlpar.envs.spaces import action_layout, noise_layout
from rlpar.models.acting.torch_acting import module_outputs
from rlpar.sampling.inference_states import SET, ClientStates, ServerStates
from rlpar.sampling.shared_arrays import attach_shared_arrays, create_shared_arrays, release_shared_arrays

log = logging.getLogger("rlpar")


class InferencePolicy:
    """The server's policy: the workers' numpy acting policy on a CPU; with a CUDA `device` (or
    `backend="torch"`), the learner's torch module there, its outputs fed to the same numpy action
    choice. A recurrent policy's states are kept here, for `num_envs` rows to begin with."""

    def __init__(self, *, policy_spec, device: str = "cpu", backend: str | None = None, num_envs: int = 0):
        self.acting = policy_spec.acting_policy()
        self.states = ServerStates(policy_spec.state_size, num_envs) if policy_spec.state_size else None
        self.module = None
        wants_torch = (backend or ("numpy" if device == "cpu" else "torch")) == "torch"
        if wants_torch and getattr(policy_spec, "torch_inference", True):  # (multi-agent rows: numpy copies)
            import torch

            self.torch, self.device = torch, torch.device(device)
            self.module = policy_spec.build().to(self.device).requires_grad_(False)
            self.module_keys = set(self.module.state_dict())

    def set_weights(self, weights: dict) -> None:
        self.acting.set_weights(weights)  # also what `choose` and `normalize` read (ε, log-std, statistics)
        if self.module is not None:
            torch = self.torch
            state = {k: torch.as_tensor(np.asarray(v)) for k, v in weights.items() if k in self.module_keys}
            self.module.load_state_dict(state)

    def answer(self, raw_obs: np.ndarray, noise: np.ndarray, rows=None, codes=None, set_values=None) -> tuple:
        """What the workers record for raw observations; for a recurrent policy (environment
        rows `rows`, entering states from `codes` and `set_values`, inference_states) the next
        states follow."""
        if self.states is None:
            return self.act_raw(raw_obs, noise)
        state = self.states.enter(rows, codes, set_values)
        replies = self.act_raw(raw_obs, noise, state)
        self.states.keep(rows, state)
        return (*replies, state)

    def act_raw(self, raw_obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None = None):
        """As an acting copy's: a recurrent policy's `state` ([N, S] float64) advances in place."""
        if self.module is None:
            return self.acting.act_raw(raw_obs, noise, state)
        obs = self.acting.normalize(raw_obs)
        outputs = module_outputs(self.torch, self.module, obs, state, self.device)
        return (obs, *self.acting.choose(outputs, noise))


def inference_layout(policy_spec, num_envs: int) -> dict:
    """Shapes and dtypes of the request and reply arrays of `num_envs` environments."""
    obs = ((num_envs, policy_spec.obs_dim), np.dtype(policy_spec.obs_dtype))
    states = ((num_envs, policy_spec.state_size), np.float64)
    return {
        "request_obs": obs,
        "request_noise": noise_layout(policy_spec.action, (num_envs,)),
        "reply_obs": obs,
        "reply_actions": action_layout(policy_spec.action, (num_envs,)),
        "reply_logp": ((num_envs,), np.float32),
        "reply_values": ((num_envs,), np.float32),
        **(
            {"request_state_code": ((num_envs,), np.int8), "request_state": states, "reply_state": states}
            if policy_spec.state_size
            else {}
        ),
    }


REPLIES = ("reply_obs", "reply_actions", "reply_logp", "reply_values")
RECURRENT_REPLIES = (*REPLIES, "reply_state")
ANSWERED, CLOSED = b"\0", b"\1"  # what the learner rings back


class ServerStats:
    """Forward passes, the rows they answered, and the time they took, since the last `take`."""

    def __init__(self):
        self.batches = self.rows = 0
        self.busy_s = 0.0

    def add(self, rows: int, seconds: float) -> None:
        self.batches += 1
        self.rows += rows
        self.busy_s += seconds

    def take(self) -> dict:
        stats = {
            "inference_batches": self.batches,
            "inference_batch_mean": self.rows / max(self.batches, 1),
            "inference_busy_s": self.busy_s,
        }
        self.batches = self.rows = 0
        self.busy_s = 0.0
        return stats


# -- shared memory (parallel=multiprocess) ----------------------------------------------------


class SharedMemoryInferenceClient:
    """A worker's end: its rows of the shared arrays and its doorbell."""

    def __init__(self, *, names: dict, layout: dict, rows: slice, conn):
        self.names, self.layout, self.rows, self.conn = names, layout, rows, conn

    def open(self) -> SharedMemoryInferenceClient:
        """Attach, in the worker's process."""
        self.blocks, arrays = attach_shared_arrays(self.names, self.layout)
        self.arrays = {k: v[self.rows] for k, v in arrays.items()}
        self.learner_pid = os.getppid()
        self.states = ClientStates() if "reply_state" in self.arrays else None
        return self

    def release(self) -> None:
        """The learner's copy of the worker's doorbell, once the worker process holds its own."""
        self.conn.close()

    def set_weights(self, weights: dict) -> None:
        """Weights live on the server."""

    def act_raw(self, raw_obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None = None):
        """As an acting copy's: a recurrent policy's `state` advances in place (the server's next state)."""
        self.arrays["request_obs"][:] = raw_obs
        self.arrays["request_noise"][:] = noise
        if self.states is not None:
            assert state is not None  # a recurrent policy's client is given its state
            codes, values = self.states.request(state)
            self.arrays["request_state_code"][:] = codes
            self.arrays["request_state"][codes == SET] = values
        self.conn.send_bytes(b"\0")
        # A forked sibling may hold the learner's end of this pipe, so the learner's death need not
        # reach us as end-of-file: check that it still lives while waiting.
        while not self.conn.poll(1.0):
            if os.getppid() != self.learner_pid:
                raise EOFError("the learner's process is gone")
        if self.conn.recv_bytes() != ANSWERED:
            raise EOFError("the learner closed central inference")
        if self.states is not None:
            assert state is not None
            self.states.replied(state, self.arrays["reply_state"])
        return tuple(self.arrays[name].copy() for name in REPLIES)


class SharedMemoryInference:
    """The learner's end: the shared arrays, a doorbell per worker, and the thread that serves."""

    def __init__(
        self,
        *,
        policy_spec,
        num_envs: int,
        worker_envs: int,
        device: str = "cpu",
        backend: str | None = None,
        wait_ms: float = 0.2,
    ):
        self.policy = InferencePolicy(policy_spec=policy_spec, device=device, backend=backend, num_envs=num_envs)
        self.worker_envs, self.wait_s = worker_envs, wait_ms / 1000.0
        self.layout = inference_layout(policy_spec, num_envs)
        self.blocks, self.arrays = create_shared_arrays(self.layout)
        self.names = {key: block.name for key, block in self.blocks.items()}
        self.doorbells: dict[int, connection.Connection] = {}  # worker -> the learner's end
        self.retired: list = []  # replaced doorbells: closed by the serving thread, which may be waiting on them
        self.lock = threading.Lock()  # doorbells, retired, the policy
        self.has_weights = threading.Event()
        self.stats = ServerStats()
        self.error: str | None = None
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, name="rlpar-inference", daemon=True)
        self.thread.start()

    def client(self, worker: int, context) -> SharedMemoryInferenceClient:
        """A client for worker `worker` (a new doorbell: a replacement worker gets a fresh one)."""
        learner_end, worker_end = context.Pipe()
        with self.lock:
            old = self.doorbells.pop(worker, None)
            if old is not None:
                self.retired.append(old)
            self.doorbells[worker] = learner_end
        rows = slice(worker * self.worker_envs, (worker + 1) * self.worker_envs)
        return SharedMemoryInferenceClient(names=self.names, layout=self.layout, rows=rows, conn=worker_end)

    def set_weights(self, weights: dict) -> None:
        self.raise_if_failed()
        with self.lock:
            self.policy.set_weights(weights)
        self.has_weights.set()

    def metrics(self) -> dict:
        self.raise_if_failed()
        with self.lock:
            return self.stats.take()

    def raise_if_failed(self) -> None:
        if self.error:
            raise RuntimeError(f"central inference stopped: {self.error}")

    def _serve(self) -> None:
        try:
            while not self.stopping:
                with self.lock:
                    for conn in self.retired:
                        conn.close()
                    self.retired.clear()
                    by_conn = {conn: worker for worker, conn in self.doorbells.items()}
                if not by_conn:
                    time.sleep(0.01)
                    continue
                ready: list[Any] = connection.wait(list(by_conn), timeout=0.05)  # the workers' Connections
                deadline = time.monotonic() + self.wait_s
                while ready and len(ready) < len(by_conn) and time.monotonic() < deadline:
                    rest = [c for c in by_conn if c not in ready]
                    ready += connection.wait(rest, timeout=max(deadline - time.monotonic(), 0.0))
                ringing = []
                for conn in ready:
                    try:
                        conn.recv_bytes()
                        ringing.append(conn)
                    except (EOFError, OSError):  # the worker died: the pool replaces it
                        self._retire(by_conn[conn], conn)
                if ringing:
                    self._answer(sorted(by_conn[c] for c in ringing))
                    for conn in ringing:
                        try:
                            conn.send_bytes(ANSWERED)
                        except (BrokenPipeError, OSError):
                            self._retire(by_conn[conn], conn)
        except BaseException:
            self.error = traceback.format_exc().strip().splitlines()[-1]
            log.error("central inference stopped: %s", self.error)

    def _retire(self, worker: int, conn) -> None:
        with self.lock:
            if self.doorbells.get(worker) is conn:
                del self.doorbells[worker]
                self.retired.append(conn)

    def _answer(self, workers: list[int]) -> None:
        """One forward pass for every environment of `workers`."""
        E = self.worker_envs
        rows = np.concatenate([np.arange(w * E, (w + 1) * E) for w in workers])
        self.has_weights.wait()
        start = time.perf_counter()
        request = [self.arrays["request_obs"][rows], self.arrays["request_noise"][rows]]
        if self.policy.states is not None:
            codes = self.arrays["request_state_code"][rows]
            request += [rows, codes, self.arrays["request_state"][rows][codes == SET]]
        with self.lock:
            replies = self.policy.answer(*request)
            self.stats.add(len(rows), time.perf_counter() - start)
        for name, values in zip(RECURRENT_REPLIES, replies):
            self.arrays[name][rows] = values

    def close(self) -> None:
        self.stopping = True
        self.has_weights.set()
        self.thread.join(5.0)
        with self.lock:
            for conn in self.doorbells.values():  # a worker waiting for actions stops waiting
                try:
                    conn.send_bytes(CLOSED)
                except OSError:
                    pass
            for conn in [*self.doorbells.values(), *self.retired]:
                conn.close()
            self.doorbells, self.retired = {}, []
        release_shared_arrays(self.blocks)
        self.blocks = {}


# -- Ray (parallel=distributed) ---------------------------------------------------------------


class _PendingBatch:
    """Requests answered by one forward pass, and then their replies."""

    def __init__(self):
        self.requests: list = []  # (raw observations, noise), and a recurrent policy's (rows, codes, SET values)
        self.replies: list | None = None
        self.error: Exception | None = None


class InferenceServer:
    """The Ray actor (threaded, `max_concurrency` above the number of runners): each `act` call
    joins the batch being gathered; the call that completes it, or that has waited `wait_ms`,
    runs the forward pass for all of them."""

    def __init__(self, *, policy_spec, device: str = "cpu", backend: str | None = None, wait_ms: float = 1.0):
        self.policy = InferencePolicy(policy_spec=policy_spec, device=device, backend=backend)
        self.wait_s = wait_ms / 1000.0
        self.expected = 1  # requests that make a full batch: the live runners
        self.batch = _PendingBatch()
        self.changed = threading.Condition()
        self.has_weights = threading.Event()
        self.stats = ServerStats()

    def set_weights(self, weights: dict, live_workers: int) -> None:
        with self.changed:
            self.policy.set_weights(weights)
            self.expected = max(live_workers, 1)
        self.has_weights.set()

    def act(self, raw_obs: np.ndarray, noise: np.ndarray, first_env: int = 0, codes=None, set_values=None):
        """Replies for a runner's environments; a recurrent policy's are rows [first_env,
        first_env + N) of the run, their entering states from `codes` (inference_states)."""
        self.has_weights.wait()
        request: tuple = (raw_obs, noise)
        if codes is not None:
            request += (np.arange(first_env, first_env + len(raw_obs)), codes, set_values)
        with self.changed:
            batch = self.batch
            index = len(batch.requests)
            batch.requests.append(request)
            deadline = time.monotonic() + self.wait_s
            while batch.replies is None and batch.error is None:
                left = deadline - time.monotonic()
                if len(batch.requests) >= self.expected or left <= 0:
                    self._answer(batch)
                else:
                    self.changed.wait(left)
        if batch.error is not None:
            raise batch.error
        assert batch.replies is not None  # answered without an error
        return tuple(reply[index] for reply in batch.replies)

    def _answer(self, batch: _PendingBatch) -> None:
        """Under the lock: one forward pass for `batch`, which stops taking requests."""
        self.batch = _PendingBatch()
        start = time.perf_counter()
        sizes = [len(request[0]) for request in batch.requests]
        try:
            replies = self.policy.answer(*(np.concatenate(parts) for parts in zip(*batch.requests)))
            batch.replies = [np.split(reply, np.cumsum(sizes)[:-1]) for reply in replies]
        except Exception as err:  # every waiting runner hears of it
            batch.error = err
        self.stats.add(sum(sizes), time.perf_counter() - start)
        self.changed.notify_all()

    def metrics(self) -> dict:
        return self.stats.take()

    def location(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()


class RayInferenceClient:
    """An env runner's end: the server's actor handle, and the run's row of its first environment."""

    def __init__(self, server, first_env: int = 0):
        self.server, self.first_env = server, first_env
        self.states = ClientStates()

    def open(self) -> RayInferenceClient:
        import ray

        self.get = ray.get
        return self

    def set_weights(self, weights: dict) -> None:
        """Weights live on the server."""

    def act_raw(self, raw_obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None = None):
        """As an acting copy's: a recurrent policy's `state` advances in place (the server's next state)."""
        if state is None:
            return self.get(self.server.act.remote(raw_obs, noise))
        codes, values = self.states.request(state)
        *replies, next_state = self.get(self.server.act.remote(raw_obs, noise, self.first_env, codes, values))
        self.states.replied(state, next_state)
        return tuple(replies)
