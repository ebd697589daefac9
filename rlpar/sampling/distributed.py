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
from dataclasses import dataclass
from typing import Any

from rlpar.errors import EnvironmentFailedError
from rlpar.sampling.batch import Batch
from rlpar.sampling.errors import WorkerFailure
from rlpar.sampling.inference import InferenceServer, RayInferenceClient
from rlpar.sampling.pool import WorkerPoolConfig, WorkerPoolSampler
from rlpar.sampling.services import ActorService, Service
from rlpar.selfplay.pool import snapshots_carried
from rlpar.typed_config import number

INLINE_WEIGHT_BYTES = 256 * 1024  # weights x workers: below this, requests carry the weights themselves


class EnvRunner:
    """The actor body: a worker (sampling.base.Worker) plus where it runs (node and process)."""

    def __init__(self, worker_class, **worker_kwargs):
        self.worker = worker_class(**worker_kwargs)

    def location(self) -> tuple[str, int, str | None]:
        """Node, process, and placement group (None outside one)."""
        import ray

        context = ray.get_runtime_context()
        return context.get_node_id(), os.getpid(), context.get_placement_group_id()

    def sample(self, weights: dict | None, version: int) -> Batch:
        if weights is not None:
            self.worker.set_weights(weights, version)
        return self.worker.sample()


def learner_room_problem(config) -> str | None:
    """learners=N on a private Ray instance, whose CPUs are known before it starts: a learner group
    that cannot fit beside the env runners would wait for room that never comes."""
    learners, workers = config.get("learners"), config.get("workers")
    per_learner, per_worker = config.get("ray.cpus_per_learner"), config.get("ray.cpus_per_worker")
    cpus = config.get("ray.num_cpus") or os.cpu_count() or 0
    numbers = (learners, workers, per_learner, per_worker, cpus)
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 for n in numbers) or learners < 2:
        return None
    if learners * per_learner + workers * per_worker <= cpus + 1e-9:
        return None
    counted = "ray.num_cpus" if config.get("ray.num_cpus") else "ray.num_cpus: null, this machine's cores"
    return (
        f"learners: {learners} learners reserve {learners * per_learner:g} CPU (ray.cpus_per_learner {per_learner:g} "
        f"each) and {workers} worker{'s' if workers > 1 else ''} {workers * per_worker:g} (ray.cpus_per_worker "
        f"{per_worker:g}): more than the {cpus:g} CPU of the private Ray instance ({counted}), so the group would "
        f"never start; use fewer learners, a smaller ray.cpus_per_learner, or a cluster (hardware=cluster "
        f"ray.address=...)"
    )


@dataclass(frozen=True, kw_only=True)
class DistributedConfig(WorkerPoolConfig):
    """The Ray instance's settings come from the `ray` group (checked there)."""

    ray_address: str | None = None
    ray_num_cpus: int | None = None
    cpus_per_worker: float = 0.1
    cpus_per_learner: float = 0.5
    object_store_mb: int = 256
    rebalance_interval_s: float | None = number(5.0, low=0, optional=True)


class DistributedSampler(WorkerPoolSampler):
    uses_ray = True
    learner_groups = True
    Config = DistributedConfig

    @classmethod
    def worker_process_kind(cls, config) -> str | None:
        """Env runners of a private Ray instance on this machine; none here on a user's cluster."""
        return None if config.get("ray.address") else "ray"

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """Joining a cluster that is not there would otherwise fail only after Ray's long retries."""
        from rlpar.cluster.address import ray_address_problem

        problems = super().config_problems(config)
        address = config.get("ray.address")
        if address and (problem := ray_address_problem(address)):  # no address: a private instance
            problems.append(f"ray.address: {problem}")
        if not address and (problem := learner_room_problem(config)):
            problems.append(problem)
        return problems

    def __init__(
        self,
        *,
        name: str = "distributed",
        ray_address: str | None = None,
        ray_num_cpus: int | None = None,
        cpus_per_worker: float = 0.1,
        cpus_per_learner: float = 0.5,
        object_store_mb: int = 256,
        rebalance_interval_s: float | None = 5.0,
        **pool_kwargs,
    ):
        """`pool_kwargs`: WorkerPoolSampler's (env_spec, policy_spec, num_workers, envs_per_worker,
        rollout_length, seed, sync_mode, max_policy_lag and the failure limits).
        `rebalance_interval_s`: how often to look for nodes short of their share of the runners
        (None or 0: never)."""
        super().__init__(name=name, **pool_kwargs)
        self.cpus_per_learner = cpus_per_learner
        self.cpus_per_worker = cpus_per_worker
        self.worker_moves = 0
        from rlpar.cluster.connection import RayConnection

        self.connection = RayConnection(
            address=ray_address,
            num_cpus=ray_num_cpus,
            object_store_mb=object_store_mb,
            py_modules=user_modules(self.env_spec) if ray_address else (),
        )
        # No node can join a private instance: its runs skip the GCS calls of looking.
        self.rebalance_interval_s = None if self.connection.stops_instance else (rebalance_interval_s or None)
        self._next_rebalance = time.monotonic() + (self.rebalance_interval_s or 0.0)
        ray = self.ray = self.connection.ray
        # Spread over the nodes; a replacement goes wherever capacity exists, and one that finds
        # none waits, without holding up training, until a node joins. No task events: the GCS
        # keeps up to 100,000 of them (RAY_task_events_max_num_task_in_gcs), and at hundreds of
        # sample() calls a second they grew its memory by ~50 MB a minute (docs/benchmarks.md, Soak).
        from ray.util import get_current_placement_group

        self.placement_group = get_current_placement_group()  # a search trial's
        self.runner_options = dict(
            num_cpus=cpus_per_worker,
            scheduling_strategy=_runner_placement(self.placement_group),
            enable_task_events=False,
        )
        self.runner_cls = ray.remote(EnvRunner).options(**self.runner_options)
        self.runners: list = [None] * self.num_workers
        self.locations: list[tuple[str, int, str | None] | None] = [None] * self.num_workers  # node, pid, group
        self.location_refs: dict = {}  # object ref -> starting worker
        self.pending: dict = {}  # object ref -> worker index
        self._weights_ref: Any = None  # a Ray object reference
        self._weights_version: tuple | None = None  # what it holds: the version, its keys, the pool's snapshots
        self.inference: Any = self._start_inference_server() if self.central_inference else None  # an actor handle
        # Not waited for here: runners boot while the learner and logger are being built.
        self.start_workers()

    def begin(self, weights: dict, version: int) -> None:
        self.connection.check()
        super().begin(weights, version)

    def sample(self, weights: dict, version: int) -> Batch:
        self.connection.check()  # first: once the raylet is gone, even putting the weights blocks
        # (not while a begun blocking round is out: moving a runner would drop its rollout)
        begun = self.sync_mode == "blocking" and self.in_flight
        if self.rebalance_interval_s and not begun and time.monotonic() >= self._next_rebalance:
            self._next_rebalance = time.monotonic() + self.rebalance_interval_s
            self._rebalance()
        return super().sample(weights, version)

    def _rebalance(self) -> None:
        """Move runners onto nodes that joined (or came back) since they were placed: a replacement
        goes wherever capacity is at the time, so without this a cluster that loses a node and
        gets it back would leave the new node idle. Moved runners start fresh (new environment
        seeds), as replacements do, but are not failures: counted in `worker_moves`."""
        if self.placement_group is not None or self.starting:  # a trial's group is fixed; wait for the pool to settle
            return
        from ray._private.state import available_resources_per_node  # (what Ray Serve's scheduler reads)

        self.connection.check(calling_gcs=True)
        hosts = [
            n["NodeID"] for n in self.ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= self.cpus_per_worker
        ]
        # Only onto free CPUs: a node others fill would take no runner, and it would be tried again and again.
        room = {
            node: int(free.get("CPU", 0) / self.cpus_per_worker + 1e-9)
            for node, free in available_resources_per_node().items()
        }
        placed = {w: loc[0] for w in self.live if (loc := self.locations[w])}
        for worker, node in plan_moves(placed, hosts, room):
            self._relaunch(worker, node=node)
            self.worker_moves += 1

    def _launch(self, worker: int, node: str | None = None) -> None:
        """On `node` if given (soft: elsewhere if it has no room after all), else spread."""
        runner_cls = self.runner_cls
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            runner_cls = self.ray.remote(EnvRunner).options(
                **{
                    **self.runner_options,
                    "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=True),
                }
            )
        self.runners[worker] = runner_cls.remote(self.worker_class, **self.worker_kwargs(worker))
        self.locations[worker] = None
        self.location_refs[self.runners[worker].location.remote()] = worker

    def _start_inference_server(self):
        """On the learner's node (SEED's learner-side inference); restarted by Ray if it dies, and
        given the weights again by the next round."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self.ray.get_runtime_context().get_node_id()
        # Ray hides GPUs from actors that ask for none: ask for a sliver of one to see it.
        gpus = 0.01 if self.inference_options["device"].startswith("cuda") else 0
        if gpus and not self.ray.available_resources().get("GPU", 0):
            raise RuntimeError(
                f"parallel.inference=central with hardware.device={self.inference_options['device']}: "
                "the Ray cluster has no free GPU for the InferenceServer"
            )
        server_cls = self.ray.remote(InferenceServer).options(
            num_cpus=0,
            num_gpus=gpus,
            max_restarts=-1,
            enable_task_events=False,
            max_concurrency=2 * self.num_workers + 4,  # every runner's request, and the learner's calls
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        )
        return server_cls.remote(policy_spec=self.policy_spec, **self.inference_options)

    def _inference_client(self, worker: int):
        return RayInferenceClient(self.inference, first_env=worker * self.worker_envs)

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
        """A Ray actor asking for no CPU; with `node_index`, on the node_index-th live node (mod
        their number), chosen afresh at every (re)start: Ray's SPREAD strategy, and a soft node
        affinity, put zero-CPU actors on one node 1 time in 4."""
        ray = self.ray

        def start(state: dict | None):
            self.connection.check(calling_gcs=True)
            options: dict[str, Any] = {"num_cpus": 0}
            if node_index is not None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                    node_id=nodes[node_index % len(nodes)], soft=False
                )
            return (
                ray.remote(service_class)
                .options(**options)
                .remote(**settings, **({} if state is None else {"state": state}))
            )

        return self.keep_service(ActorService(ray=ray, start=start, name=name, on_lost=on_lost))

    def start_learner_group(
        self, *, make_learner, world_size: int, seed: int, torch_threads: int, timeout_s: float, max_restarts: int
    ):
        """Ranks 1..world_size-1 of a learner group as Ray actors (rlpar.learners.group); rank 0
        is the algorithm's learner in this process. Stopped by the algorithm, before this sampler closes."""
        from rlpar.learners.group import LearnerGroup

        return LearnerGroup(
            ray=self.ray,
            make_learner=make_learner,
            world_size=world_size,
            seed=seed,
            cpus_per_learner=self.cpus_per_learner,
            torch_threads=torch_threads,
            timeout_s=timeout_s,
            max_restarts=max_restarts,
        )

    def _set_inference_weights(self, weights: dict, version: int) -> None:
        """Every round (a restarted server has none), waited for: in blocking mode the round's
        first step must act with exactly these weights."""
        weights_ref = self._stored_weights(weights, version)
        for _attempt in range(50):
            try:
                self.ray.get(self.inference.set_weights.remote(weights_ref, len(self.live) or self.num_workers))
                return
            except self.ray.exceptions.RayActorError:  # restarting
                time.sleep(0.1)
        raise RuntimeError("the central inference server (InferenceServer) did not come back within 5 s")

    def _inference_metrics(self) -> dict:
        return self.ray.get(self.inference.metrics.remote())

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
        if weights:  # (None: the runner has them; empty: central inference, the version only)
            weights = self._stored_weights(weights, version)
        ref = self.runners[worker].sample.remote(weights, version)
        self.pending[ref] = worker

    def _stored_weights(self, weights: dict, version: int):
        """The weights in the object store, put there once per version (and content) for every reader; small
        ones are sent inline with each request instead (Ray copies arguments under 100 KB into
        the call, far cheaper than a put for a small policy: docs/benchmarks.md)."""
        size = sum(getattr(value, "nbytes", INLINE_WEIGHT_BYTES) for value in weights.values())  # not arrays: put
        if size * len(self.runners) < INLINE_WEIGHT_BYTES:
            return weights
        # one version's weights differ in what they carry: everything (central inference's
        # server), the pool alone (its workers), the pool's snapshots a worker lacks
        stored = (version, tuple(weights), snapshots_carried(weights))
        if self._weights_version != stored:
            self._weights_ref, self._weights_version = self.ray.put(weights), stored
        return self._weights_ref

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
            self.connection.check()
            return []
        return self.connection.wait(refs, timeout=timeout)

    def _get(self, ref):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as err:  # actor died, node lost, or the runner raised
            self.connection.check()  # runners that died with the private instance: not replaced
            cause = getattr(err, "cause", None)
            return WorkerFailure(_describe(err), stops_run=cause if isinstance(cause, EnvironmentFailedError) else None)

    def _stop(self, worker: int) -> None:
        for refs in (self.pending, self.location_refs):
            for ref in [r for r, w in refs.items() if w == worker]:
                del refs[ref]
        try:
            self.ray.kill(self.runners[worker])
        except Exception:
            pass  # already gone with its node
        self.runners[worker] = None

    def _lost_with_its_node(self, worker: int) -> bool:
        location = self.locations[worker]
        if location is None:  # never came up: its node is unknown
            return False
        self.connection.check(calling_gcs=True)
        return not any(n["NodeID"] == location[0] and n["Alive"] for n in self.ray.nodes())

    def worker_pids(self) -> list[int | None]:
        return [loc[1] if loc else None for loc in self.locations]

    def num_nodes(self) -> int:
        return len({loc[0] for w in self.live if (loc := self.locations[w])})

    def metrics(self) -> dict:
        metrics = {**super().metrics(), "worker_moves": self.worker_moves}
        if self.placement_group is not None:  # a search trial: its runners should all be in its group
            group = self.placement_group.id.hex()
            metrics["runners_in_placement_group"] = sum(
                1 for w in self.live if (loc := self.locations[w]) and loc[2] == group
            )
        return metrics

    def close(self) -> None:
        # The private instance takes its actors with it: killing hundreds one by one first (a GCS
        # call each) only delays the stop. A lost instance or head answers no such call.
        if not (hasattr(self, "connection") and (self.connection.stops_instance or self.connection.lost)):
            self.stop_services()
            for worker, runner in enumerate(getattr(self, "runners", [])):
                if runner is not None:
                    self._stop(worker)
            if getattr(self, "inference", None) is not None:
                self.ray.kill(self.inference)
        self.runners, self.inference, self.pending, self.location_refs = [None] * self.num_workers, None, {}, {}
        if hasattr(self, "connection"):
            self.connection.shutdown()


def plan_moves(placed: dict[int, str], hosts: list[str], room: dict[str, int] | None = None) -> list[tuple[int, str]]:
    """(worker, node) moves that leave no host node with fewer than its floor share of the placed
    runners, taking from the nodes that hold the most; none while every host has its share
    (uneven counts within one of each other stay as they are). `room`: how many more runners
    each node has free CPUs for (absent: no limit)."""
    if not hosts or not placed:
        return []
    room = dict(room) if room is not None else {}
    on_node: dict[str, list[int]] = {node: [] for node in hosts}
    for worker in sorted(placed):
        on_node.setdefault(placed[worker], []).append(worker)
    share = len(placed) // len(hosts)
    moves: list[tuple[int, str]] = []
    for node in sorted(hosts, key=lambda n: len(on_node[n])):
        while len(on_node[node]) < share and room.get(node, len(placed)) > 0:
            room[node] = room.get(node, len(placed)) - 1
            fullest = max(on_node, key=lambda n: (len(on_node[n]), n))
            if len(on_node[fullest]) <= share:
                return moves
            worker = on_node[fullest].pop()
            on_node[node].append(worker)
            moves.append((worker, node))
    return moves


def user_modules(env_spec) -> list[str]:
    """The file or package of the environment's `entry_point` when it is the user's own code
    (not an installed package): shipped to every node of a user's cluster (Ray's `py_modules`),
    where the launch directory may not exist."""
    from rlpar.envs.factory import user_module_path

    path = user_module_path(env_spec.entry_point, env_spec.import_dir) if env_spec.entry_point else None
    return [path] if path else []


def _runner_placement(group):
    """SPREAD over the cluster; inside a placement group (a search trial's), into it, so that one
    trial's runners never take another's CPUs."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if group is None:
        return "SPREAD"
    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_capture_child_tasks=True)


def _describe(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]
