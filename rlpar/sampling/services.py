"""Side services an algorithm asks its sampler for (A3C's parameter server, Ape-X's replay
shards), behind one handle whatever the process layout: `call` it, `restart` it, `stop` it.

Where a service runs is the sampler's choice (`Sampler.start_service`):
- `InProcessService`: an object in the learner's process (parallel=local; parallel=multiprocess
  for a service that cannot share memory, such as a replay table); with shared memory
  (parallel=multiprocess, Hogwild) the forked workers hold the very same object.
- `ActorService`: a Ray actor (parallel=distributed).

Fault tolerance lives here, once for every service: a call to an actor that died or did not
answer within `CALL_TIMEOUT_S` restarts it, counted in `restarts`, from what the algorithm's
`on_lost` answers (the newest copy of its state, `kept`, or None: empty), and answers None. A
worker that finds a service dead reports its `generation`, and `report_lost` restarts it once.
Workers reach a service through its `address` (None where they cannot: they send their data back
with the batch), and a new generation gets a new address.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rlpar.errors import ServiceLost

CALL_TIMEOUT_S = 60  # a service that does not answer within this is taken for dead
log = logging.getLogger("rlpar")


def built_here(service_class, settings: dict) -> Callable[[dict | None], object]:
    """`start(state)` of a service object built in this process (`state` passed on a restart)."""
    return lambda state: service_class(**settings, **({} if state is None else {"state": state}))


class LocalAddress:
    """A worker's end of a service it shares a process or memory with: plain method calls.
    `shared`: the worker holds the learner's own object in shared memory (it reads the newest
    state in place); `concurrent`: False, it serves no caller while the learner works."""

    concurrent = False

    def __init__(self, instance, *, generation: int, shared: bool = False):
        self.instance, self.generation, self.shared = instance, generation, shared

    def call(self, method: str, *args):
        return getattr(self.instance, method)(*args)

    def request(self, method: str, *args):
        return self.call(method, *args)

    def answer(self, request):
        return request


class ActorAddress:
    """A worker's end of a Ray actor: `request` returns at once, `answer` waits; both raise
    ServiceLost once the actor is gone."""

    concurrent, shared = True, False

    def __init__(self, actor, *, generation: int):
        self.actor, self.generation = actor, generation

    def call(self, method: str, *args):
        return self.answer(self.request(method, *args))

    def request(self, method: str, *args):
        return getattr(self.actor, method).remote(*args)

    def answer(self, request):
        import ray

        try:
            return ray.get(request)
        except ray.exceptions.RayActorError as err:
            raise ServiceLost(str(err)) from None


class Service:
    """The handle: what every layout offers the algorithm. `shared`: the learner and the workers
    hold the very same object (shared memory), so workers read its newest state themselves."""

    shared = False

    def __init__(self, *, name: str, on_lost: Callable[[dict | None], dict | None] | None = None):
        """`on_lost(kept)`: called when the service is found dead, with the newest copy of its
        state kept (or None); answers the state to restart it from (None: empty)."""
        self.name, self.on_lost = name, on_lost
        self.generation = 0  # starts so far, less one
        self.restarts = 0  # after losses (a `restart` asked for is not counted)
        self.kept: dict | None = None  # the newest copy of its state taken by `keep`

    @property
    def address(self):
        """What a worker is sent to reach the service; None where it cannot reach it."""
        raise NotImplementedError

    def call(self, method: str, *args):
        """The service's answer; None when it was lost (then it has been restarted)."""
        return self.answer(self.request(method, *args))

    def request(self, method: str, *args):
        """A call not waited for: its answer comes from `answer` (a call to an object in this
        process is made then)."""
        raise NotImplementedError

    def answer(self, request):
        raise NotImplementedError

    def tell(self, method: str, *args) -> None:
        """A call whose answer nobody waits for."""
        raise NotImplementedError

    def keep(self) -> None:
        """Take a copy of the service's state to restart it from, should it die (nothing to do
        for one in this process: it dies only with the learner)."""

    def state(self) -> dict | None:
        """Its state for a checkpoint: its current one, or (an actor) the newest copy kept (None:
        none kept yet)."""
        raise NotImplementedError

    def report_lost(self, generation: int) -> None:
        """A worker found generation `generation` dead: restarted unless that is done already."""
        if generation == self.generation:
            self.lose()

    def lose(self) -> None:
        """Restart it after a loss, and say so on the console: what it held may be gone."""
        state = self.on_lost(self.kept) if self.on_lost else None
        self.restarts += 1
        log.warning(
            "%s was lost; restarted %s (restart %d)",
            self.name,
            "empty: what it held is gone" if state is None else "from its newest copy",
            self.restarts,
        )
        self.restart(state=state)

    def restart(self, *, state: dict | None = None) -> None:
        """Stop it (if it still runs) and start it again from `state` (None: empty)."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class InProcessService(Service):
    def __init__(self, *, start: Callable[[dict | None], Any], reachable: bool, shared: bool = False, **service_kwargs):
        """`start(state)` builds the object; `reachable`: workers can call it (they run in
        this process, or share its memory: `shared`)."""
        super().__init__(**service_kwargs)
        self.start, self.reachable, self.shared = start, reachable, shared
        self.instance = start(None)

    @property
    def address(self) -> LocalAddress | None:
        if not self.reachable:
            return None
        return LocalAddress(self.instance, generation=self.generation, shared=self.shared)

    def request(self, method: str, *args):
        return lambda: getattr(self.instance, method)(*args)

    def answer(self, request):
        return request()

    def tell(self, method: str, *args) -> None:
        getattr(self.instance, method)(*args)

    def state(self) -> dict | None:
        return self.instance.state()

    def restart(self, *, state: dict | None = None) -> None:
        self.instance = self.start(state)
        self.generation += 1

    def stop(self) -> None:
        self.instance = None


class ActorService(Service):
    def __init__(self, *, ray, start: Callable[[dict | None], object], **service_kwargs):
        """`start(state)` creates the actor (where is the sampler's choice)."""
        super().__init__(**service_kwargs)
        self.ray, self.start = ray, start
        self.actor = start(None)

    @property
    def address(self) -> ActorAddress:
        return ActorAddress(self.actor, generation=self.generation)

    def request(self, method: str, *args):
        return getattr(self.actor, method).remote(*args)

    def answer(self, request):
        try:
            return self.ray.get(request, timeout=CALL_TIMEOUT_S)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            self.lose()
            return None

    def tell(self, method: str, *args) -> None:
        getattr(self.actor, method).remote(*args)

    def keep(self) -> None:
        state = self.call("state")
        if state is not None:  # (None: it was lost, and restarted from the copy before)
            self.kept = state

    def state(self) -> dict | None:
        return self.kept

    def restart(self, *, state: dict | None = None) -> None:
        self.stop()
        self.actor = self.start(state)
        self.generation += 1
        self.kept = state

    def stop(self) -> None:
        if self.actor is None:
            return
        try:
            self.ray.kill(self.actor)
        except Exception:
            pass  # gone already, with its node or the Ray instance
        self.actor = None
