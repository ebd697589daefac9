"""The learner group (`learners=N`): rank 0 is the driver's algorithm's learner, ranks 1..N-1 are
Ray actors holding replicas of that learner, one bundle each of a placement group that keeps rank 0's bundle on
the driver's node and spreads the others (docs/learners.md).

Rank 0's algorithm holds the group as its peers (rlpar.learning.peers): `learn(learner,
inputs)` shards the inputs as the learner's `input_layout` declares, learns everywhere and
returns the update's diagnostics (the whole batch's: every rank reduces them alike); the group
also keeps the other ranks' random states in rank 0's checkpoints and stops with it. A rank that dies or
never answers, also while the group starts again, ends the update on every survivor (the process
group's timeout), rank 0 returns to its weights before the update, and the group is started again
from them and learns the same inputs; `restarts` counts each time."""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import numpy as np
import torch

from rlpar.errors import LearnerGroupError, first_line
from rlpar.learners.collective import join_group, leave_group, meeting_point
from rlpar.learners.peers import RankPeers, join, learner_of, leave
from rlpar.learners.shard import shard_inputs
from rlpar.learning.errors import NonFiniteLossError

PLACEMENT_TIMEOUT_S = 120  # a cluster without room for the group is named, not waited on forever


class LearnerRank:
    """One rank of the group in its own process: a replica of rank 0's learner (`make_learner`:
    a Learner, or an algorithm that learns itself built with the batches' shape in place of a
    sampler), whose random generator is its own (each rank shuffles its own columns)."""

    def __init__(self, *, make_learner, rank: int, seed: int, torch_threads: int):
        torch.set_num_threads(torch_threads)
        self.rank, self.seed = rank, seed
        self.learner = make_learner()

    def location(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def join(
        self, *, address: str, port: int, world_size: int, timeout_s: float, state: dict, rng: dict | None
    ) -> None:
        """Take rank 0's state, this rank's random state (fresh from the seed and rank when none
        was kept), and meet the others."""
        self.learner.load_state_dict(state)
        set_rank_rng(self.learner, rng if rng is not None else fresh_rank_rng(self.seed, self.rank))
        collective = join_group(rank=self.rank, world_size=world_size, address=address, port=port, timeout_s=timeout_s)
        join(self.learner, collective, RankPeers())

    def learn(self, inputs: dict) -> dict:
        """This rank's part of one update; returns its random state after it (rank 0 keeps it for checkpoints)."""
        self.learner.learn(inputs)
        return rank_rng(self.learner)

    def random_state(self) -> dict:
        return rank_rng(self.learner)


def fresh_rank_rng(seed: int, rank: int) -> dict:
    return {
        "numpy": np.random.default_rng([seed, 7, rank]).bit_generator.state,
        "torch": torch.Generator().manual_seed(seed * 1000 + rank).get_state(),
    }


def rank_rng(learner) -> dict:
    """The random state a rank's gradient steps draw from: its minibatch shuffles (numpy) and torch's."""
    rng = getattr(learner, "rng", None)
    return {"numpy": rng.bit_generator.state if rng is not None else None, "torch": torch.get_rng_state()}


def set_rank_rng(learner, state: dict) -> None:
    rng = getattr(learner, "rng", None)
    if rng is not None and state["numpy"] is not None:
        rng.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch"])


def learner_state(learner) -> dict:
    """What every rank of a learner group starts from, and what a failed update returns rank 0
    to: the learner's state (an algorithm that learns itself: without the replay's contents,
    which only rank 0 keeps, and learning does not change)."""
    return {k: v for k, v in learner.state_dict().items() if k != "replay"}


class LearnerGroup(RankPeers):
    """Ranks 1..N-1 of the group, started on a Ray cluster; rank 0 is the learner handed to
    `learn`, whose algorithm's peers this is."""

    def __init__(
        self,
        *,
        ray,
        make_learner,
        world_size: int,
        seed: int,
        cpus_per_learner: float,
        torch_threads: int,
        timeout_s: float,
        max_restarts: int,
        log=print,
    ):
        super().__init__()
        self.ray, self.make_learner, self.world_size, self.seed = ray, make_learner, world_size, seed
        self.cpus_per_learner, self.torch_threads = cpus_per_learner, torch_threads
        self.timeout_s, self.max_restarts, self.log = timeout_s, max_restarts, log
        self.restarts, self.consecutive_failures = 0, 0
        self.actors: list = []  # Ray actor handles, rank 1 on
        self.placement: Any = None  # Ray's PlacementGroup, made by start
        self.joined = False
        self.rank_rngs: list[dict] | None = None  # ranks 1..N-1's random states after the last update
        self.locations: list[tuple[str, int]] = []
        self.start()

    # -- the group's processes ---------------------------------------------------------------
    def start(self) -> None:
        """A placement group of N bundles, bundle 0 (rank 0's) on the driver's node, SPREAD: on
        a cluster of several nodes the other ranks go to other nodes. Then ranks 1..N-1 in it."""
        from ray.util import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = self.ray
        driver_node = ray.get_runtime_context().get_node_id()
        self.refuse_if_the_cluster_cannot_hold_the_group(driver_node)
        self.placement = placement_group(
            [{"CPU": self.cpus_per_learner}] * self.world_size,
            strategy="SPREAD",
            bundle_label_selector=[{"ray.io/node-id": driver_node}] + [{}] * (self.world_size - 1),
        )
        try:
            ray.get(self.placement.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.remove_placement()
            raise LearnerGroupError(
                f"learners={self.world_size}: the Ray cluster found no room for {self.world_size} bundles of "
                f"{self.cpus_per_learner} CPU in {PLACEMENT_TIMEOUT_S} s (ray.cpus_per_learner; free: "
                f"{ray.available_resources().get('CPU', 0):g} CPU)"
            ) from None
        rank_cls = ray.remote(LearnerRank)
        self.actors = [
            rank_cls.options(
                num_cpus=self.cpus_per_learner,
                max_restarts=0,
                enable_task_events=False,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self.placement, placement_group_bundle_index=rank
                ),
            ).remote(make_learner=self.make_learner, rank=rank, seed=self.seed, torch_threads=self.torch_threads)
            for rank in range(1, self.world_size)
        ]
        self.locations = [(driver_node, os.getpid())] + ray.get(
            [a.location.remote() for a in self.actors], timeout=PLACEMENT_TIMEOUT_S
        )
        nodes = len({node for node, _ in self.locations})
        self.log(
            f"learners: {self.world_size} ranks on {nodes} node(s), pids "
            + ", ".join(str(pid) for _, pid in self.locations)
        )
        self.joined = False

    def refuse_if_the_cluster_cannot_hold_the_group(self, driver_node: str) -> None:
        """A group larger than the cluster's whole CPUs (not only its free ones) would wait
        PLACEMENT_TIMEOUT_S for room that never comes: refused at once, in one line."""
        nodes = {node["NodeID"]: node["Resources"].get("CPU", 0.0) for node in self.ray.nodes() if node["Alive"]}
        bundles = {node: int(cpus / self.cpus_per_learner + 1e-9) for node, cpus in nodes.items()}
        if bundles.get(driver_node, 0) >= 1 and sum(bundles.values()) >= self.world_size:
            return
        raise LearnerGroupError(
            f"learners={self.world_size}: the Ray cluster ({sum(nodes.values()):g} CPU on {len(nodes)} node(s), "
            f"{nodes.get(driver_node, 0):g} on this one) can hold at most {sum(bundles.values())} bundles of "
            f"{self.cpus_per_learner:g} CPU (ray.cpus_per_learner), one of them here; use fewer learners or a "
            f"smaller ray.cpus_per_learner"
        )

    def join(self, owner) -> None:
        """Every rank meets rank 0 (`owner`'s learner, in this process) at a free port of this
        node, with rank 0's state."""
        learner = learner_of(owner)
        address = self.ray.util.get_node_ip_address()
        listening = meeting_point(address)
        port = listening.getsockname()[1]
        state = self.ray.put(learner_state(learner))
        rngs = (
            self.rank_rngs
            if self.rank_rngs is not None and len(self.rank_rngs) == len(self.actors)
            else [None] * len(self.actors)
        )
        refs = [
            actor.join.remote(
                address=address, port=port, world_size=self.world_size, timeout_s=self.timeout_s, state=state, rng=rng
            )
            for actor, rng in zip(self.actors, rngs)
        ]
        collective = join_group(
            rank=0,
            world_size=self.world_size,
            address=address,
            port=port,
            timeout_s=self.timeout_s,
            listening=listening,
        )
        join(learner, collective, self)
        self.ray.get(refs, timeout=self.timeout_s)
        self.joined = True

    def stop(self) -> None:
        leave_group()
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        self.remove_placement()
        self.joined = False

    def close(self) -> None:
        self.stop()

    # -- what rank 0's algorithm keeps of the group ---------------------------------------------
    def metrics(self) -> dict:
        return {"learner_restarts": self.restarts}

    def state_dict(self) -> dict:
        """Ranks 1..N-1's random states, for a resume with the same N."""
        return {"learner_rngs": self.rank_rngs}

    def load_state_dict(self, state: dict) -> None:
        """The other ranks take this state when the group next meets."""
        self.rank_rngs = state.get("learner_rngs")
        self.joined = False

    def remove_placement(self) -> None:
        if self.placement is not None:
            from ray.util import remove_placement_group

            remove_placement_group(self.placement)
            self.placement = None

    # -- one update --------------------------------------------------------------------------
    def learn(self, learner, inputs: dict) -> dict:
        """The diagnostics of one update learned by every rank on its shard of `inputs`. A lost
        rank (in the update, or in the group's start or meeting before it): rank 0's weights
        before the update, the group again, the same inputs."""
        before = copy.deepcopy(learner_state(learner))
        while True:
            try:
                if not self.actors:  # torn down by a failure: started again here, where its own failures count
                    self.start()
                if not self.joined:
                    self.join(learner)
                shards = shard_inputs(learner, inputs, self.world_size)
                refs = [actor.learn.remote(shard) for actor, shard in zip(self.actors, shards[1:])]
                stats = learner.learn(shards[0])
                self.rank_rngs = self.ray.get(refs, timeout=self.timeout_s)
                self.consecutive_failures = 0
                return {**stats, **self.in_group().reduction_costs(), **self.metrics()}
            except (NonFiniteLossError, LearnerGroupError):  # the run's own stop (the same gradient on every
                raise  # rank), or a cluster without room: not a lost rank
            except (RuntimeError, self.ray.exceptions.RayError) as err:  # gloo's errors are RuntimeErrors
                self.recover(learner, before, err)

    def recover(self, learner, before: dict, err: Exception) -> None:
        """Tear the group down and return rank 0 to `before` (or stop the run after max_restarts
        failures in a row); `learn` starts the group again."""
        self.consecutive_failures += 1
        self.restarts += 1
        cause = f"{type(err).__name__}: {first_line(err)}"
        self.stop()
        leave(learner, self)
        learner.load_state_dict(before)
        if self.consecutive_failures > self.max_restarts:
            raise LearnerGroupError(
                f"learners={self.world_size}: the learner group failed {self.consecutive_failures} "
                f"times in a row; stopping (last: {cause})"
            )
        self.log(
            f"learners: a rank was lost ({cause}); restarting the group from rank 0's weights (restart {self.restarts})"
        )
        time.sleep(min(self.consecutive_failures, 5))
