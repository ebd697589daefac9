"""The one interface every sampler offers the trainer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

from rlpar.sampling.batch import Batch
from rlpar.sampling.services import InProcessService, Service, built_here
from rlpar.typed_config import choice, integer, text


class Worker(Protocol):
    """What a sampler runs, in-process, in a subprocess or in a Ray actor: `RolloutWorker` (a
    vector env acting with the model's acting policy), or an algorithm's own (`worker_class`).
    It owns environments [first_env_index, first_env_index + num_envs) of the run and
    `batch_layout` says which arrays its rollouts fill (a multiprocess sampler allocates them in
    shared memory)."""

    def __init__(
        self,
        *,
        env_spec,
        policy_spec,
        num_envs: int,
        rollout_length: int,
        seed: int,
        first_env_index: int = 0,
        generation: int = 0,
    ): ...

    @staticmethod
    def batch_layout(policy_spec, T: int, N: int) -> dict: ...

    def set_weights(self, weights: dict, version: int) -> None: ...

    def sample(self, out: dict | None = None) -> Batch: ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class SamplerConfig:
    """The `parallel` group's keys every sampler takes (the builder adds the run's sizes, seed
    and worker class); `auto` sync mode and policy lag are the algorithm's own."""

    name: str = text("sampler")  # the group's option, for messages and analysis
    sync_mode: str = choice("auto", ("auto", "blocking", "non_blocking"))
    max_policy_lag: int | str | None = integer("auto", low=0, optional=True, also=("auto",))
    inference: str = choice("worker", ("worker", "central"))


class Sampler(ABC):
    """Turns policy weights into a batch of experience.

    `sample` receives the newest weights and their version; a blocking sampler acts with
    exactly these, a non-blocking one may return data from older versions (the batch says which).
    """

    num_envs: int
    worker_envs: int  # environments in one worker's rollout
    rollout_length: int  # steps per environment in a rollout
    # What it supports, for validation and the build:
    sync_modes: tuple[str, ...] = ("blocking", "non_blocking")
    in_learner_process = False  # its environments step in the learner's process (no copies between processes)
    uses_ray = False
    learner_groups = False  # can start a learner group (learners > 1)
    Config: type = SamplerConfig  # the keys its `parallel` node takes (rlpar.typed_config)

    @classmethod
    def worker_process_kind(cls, config) -> str | None:
        """The kind of process its workers are on this machine (rlpar.config.resources prices
        them): multiprocess, ray, or None (the learner's own process, or another machine)."""
        return None

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """The `parallel` group's rules for this sampler beyond its keys' types and ranges (its
        `Config`'s); `config` is a rlpar.config.validate.ConfigView."""
        problems = []
        algorithm = config.algorithm
        if config.get("parallel.inference") == "central" and algorithm.get("central_inference") is False:
            problems.append(
                f"parallel.inference: central needs workers that only step environments; "
                f"algo={config.get('algo.name')}'s workers do more ({algorithm.get('worker_duties')}); "
                f"use parallel.inference=worker, or algo="
                f"{config.algorithms_with('central_inference', True)}"
            )
        if algorithm.get("needs_ray") and not cls.uses_ray:  # the algorithm's actors or services are Ray actors
            instead = algorithm.get("without_ray")
            problems.append(
                f"parallel: algo={config.get('algo.name')} runs its actors and replay shards as Ray actors, which "
                f"parallel={config.get('parallel.name')} ({cls.__name__}) does not start; use parallel=distributed"
                + (f", or algo={instead} (the learner's own replay, on every sampler)" if instead else "")
            )
        if not cls.uses_ray and config.get("ray.address"):  # silently training locally instead would surprise
            problems.append(
                f"ray.address: {config.get('ray.address')!r} (hardware=cluster or ray.address) names a Ray cluster, "
                f"but parallel={config.get('parallel.name')} ({cls.__name__}) uses no Ray; use parallel=distributed, "
                f"or drop hardware=cluster and ray.address"
            )
        return problems

    @property
    def num_rollout_workers(self) -> int:
        """Workers stepping environments, each its own rollouts (1 for in-process sampling)."""
        return self.num_envs // self.worker_envs

    @abstractmethod
    def sample(self, weights: dict, version: int) -> Batch: ...

    def begin(self, weights: dict, version: int) -> None:
        """The next round's weights, known before the caller asks for its batch: the next
        `sample(weights, version)` returns that round. A sampler whose workers run elsewhere may
        start them now, so that they step environments while the learner finishes its update;
        the batch is the same either way. Here (environments in this process, or rollouts
        written into memory the last batch still reads) the round starts at `sample`."""

    def metrics(self) -> dict:
        """Timings and health of the last `sample` call, merged into the iteration's metrics."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict, *, environments: bool = True) -> None:
        """`environments=False` restores counters only and keeps the environments as built."""

    def keeps_env_state(self) -> bool:
        """Whether its checkpoints hold the environments' state, for an exact resume."""
        return False

    def drop_env_state(self, reason: str) -> None:
        """Checkpoint without environment state from now on (`reason`: why it cannot be
        pickled); a resume then starts fresh episodes."""

    def when_sampling(self, build) -> None:
        """`build()` now: what only a learner that samples keeps (its replay) is built here; a
        learner that never samples is given a stand-in that skips it (rlpar.learning.peers.BatchShape)."""
        build()

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
        """A side service for the algorithm (rlpar.sampling.services), placed where this
        sampler's layout puts it: here, in the learner's process, where a worker (in this process
        too) can call it. `settings`: `service_class`'s keyword arguments; a restart adds
        `state`. `in_shared_memory(state)`: builds the object workers share with the learner
        where they are processes that share its memory (None: it stays in the learner's);
        `node_index`: on a cluster, the service runs on the node_index-th live node (mod their
        number). Stopped by `close`."""
        service = InProcessService(
            start=built_here(service_class, settings), reachable=True, name=name, on_lost=on_lost
        )
        return self.keep_service(service)

    def keep_service(self, service: Service) -> Service:
        self.services = [*getattr(self, "services", []), service]
        return service

    def stop_services(self) -> None:
        for service in getattr(self, "services", []):
            service.stop()
        self.services = []

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
