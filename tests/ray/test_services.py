"""The handle of a side service (rlpar.sampling.services) on every sampler's layout: call it,
restart it after its process died, stop it; real samplers, real forked processes, real Ray."""

import multiprocessing
import os
import signal
import time

import pytest
import ray
import torch

from rlpar.envs.factory import resolve_env_spec
from rlpar.errors import ServiceLost
from rlpar.models.q_spec import QNetworkSpec
from rlpar.runtime.build import probe_policy_spec
from rlpar.sampling.distributed import DistributedSampler
from rlpar.sampling.local import LocalSampler
from rlpar.sampling.multiprocess import MultiprocessSampler
from tests.processes import running
from tests.ray_helpers import connected_cluster


class Tally:
    """A service with state: a running total, what it was asked, and where it runs."""

    def __init__(self, *, start: int = 0, state: dict | None = None):
        self.total = torch.tensor([start if state is None else state["total"]])

    def add(self, amount: int) -> int:
        self.total += amount
        return int(self.total)

    def state(self) -> dict:
        return {"total": int(self.total)}

    def pid(self) -> int:
        return os.getpid()

    def share_memory(self) -> "Tally":
        self.total.share_memory_()
        return self


def sampler_kwargs() -> dict:
    env_spec = resolve_env_spec(id="CartPole-v1")
    policy_spec, _ = probe_policy_spec(env_spec, QNetworkSpec)
    return dict(env_spec=env_spec, policy_spec=policy_spec, num_workers=1, envs_per_worker=1, rollout_length=8,
                seed=0)


def test_in_process_service_calls_restarts_from_a_state_and_stops():
    """parallel=local: the object lives in the learner's process, and the worker (there too)
    reaches it; a request is made when its answer is asked for."""
    sampler = LocalSampler(**sampler_kwargs())
    service = sampler.start_service(Tally, name="tally", settings={"start": 5})
    assert service.call("add", 2) == 7
    request = service.request("add", 1)
    assert service.call("state") == {"total": 7}  # not made yet
    assert service.answer(request) == 8
    service.tell("add", 2)
    address = service.address
    assert address.call("add", 0) == 10 and address.generation == 0 and not address.shared
    service.restart(state={"total": 3})
    assert service.call("add", 1) == 4 and service.state() == {"total": 4}
    assert (service.generation, service.restarts, service.address.generation) == (1, 0, 1)
    sampler.close()
    assert service.instance is None


def add_in_a_child(address, amount: int) -> None:
    address.call("add", amount)


@pytest.mark.slow
def test_multiprocess_service_is_shared_with_forked_workers_or_out_of_their_reach():
    """parallel=multiprocess: built in shared memory where the algorithm says how, a call made in
    another process lands in the learner's object; without, the workers get no address."""
    sampler = MultiprocessSampler(**sampler_kwargs())
    try:
        apart = sampler.start_service(Tally, name="in the learner", settings={})
        shared = sampler.start_service(Tally, name="shared", settings={},
                                       in_shared_memory=lambda state: Tally(state=state).share_memory())
        assert apart.address is None and apart.call("add", 1) == 1
        assert shared.shared and shared.address.shared
        child = multiprocessing.get_context("fork").Process(target=add_in_a_child, args=(shared.address, 6))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert shared.call("state") == {"total": 6}  # the child's addition, seen by the learner
    finally:
        sampler.close()
    assert shared.instance is None and apart.instance is None


@pytest.fixture(scope="module")
def cluster():
    with connected_cluster(nodes=1, cpus_per_node=1) as cluster:
        yield cluster


@pytest.fixture
def distributed(cluster):
    sampler = DistributedSampler(**sampler_kwargs(), cpus_per_worker=0.1)
    try:
        yield sampler
    finally:
        sampler.close()


@pytest.mark.slow
@pytest.mark.ray
def test_ray_service_restarts_from_the_kept_state_after_its_process_dies(distributed):
    """parallel=distributed: an actor. SIGKILL its process: the next call answers None, the
    service is restarted (in a new process) from what `on_lost` makes of the newest copy kept,
    and the restart is counted; a worker's address of the dead one says it is lost."""
    lost = []

    def on_lost(kept):
        lost.append(kept)
        return {"total": kept["total"] + 100}

    service = distributed.start_service(Tally, name="tally", settings={"start": 1}, node_index=0, on_lost=on_lost)
    assert service.call("add", 1) == 2
    service.keep()
    assert service.call("add", 3) == 5 and service.state() == {"total": 2}  # the copy kept
    old_address, first_pid = service.address, service.call("pid")
    os.kill(first_pid, signal.SIGKILL)
    assert service.call("add", 1) is None  # lost: restarted
    assert lost == [{"total": 2}] and service.restarts == 1 and service.generation == 1
    assert service.call("add", 1) == 103 and service.call("pid") != first_pid
    with pytest.raises(ServiceLost):
        old_address.call("add", 1)
    service.report_lost(0)  # an old generation's loss, reported late: nothing to do
    assert service.restarts == 1 and service.address.call("add", 0) == 103


@pytest.mark.slow
@pytest.mark.ray
def test_ray_service_reported_lost_by_a_worker_is_restarted_once_and_stop_ends_its_process(distributed):
    """A worker that finds the actor dead reports its generation: one restart (empty, without
    `on_lost`) however many report it. The sampler's close stops it: its process exits."""
    service = distributed.start_service(Tally, name="tally", settings={})
    os.kill(service.call("pid"), signal.SIGKILL)
    service.report_lost(0)
    service.report_lost(0)  # a second worker's report of the same loss
    assert service.restarts == 1 and service.generation == 1 and service.call("add", 4) == 4
    actor, pid = service.actor, service.call("pid")
    distributed.close()
    assert service.actor is None
    deadline = time.monotonic() + 60  # (not a bound on the stop: how long to wait before failing)
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid)
    # (after the exit: ray.kill is asynchronous, and a call sent at once could still be answered)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.pid.remote())
