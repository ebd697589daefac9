"""learners=2 on a real two-node Ray cluster on 127.0.0.1 (one per module): one rank per node, a
rank's process killed mid-run (and its replacement while it starts), and checkpoints that resume
with the same and another N."""

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import ray
import torch

from rlpar.errors import LearnerGroupError
from rlpar.learners.group import PLACEMENT_TIMEOUT_S
from rlpar.runtime.build import build_trainer
from tests.processes import descendants_of, running
from tests.ray_helpers import connected_cluster

pytestmark = [pytest.mark.slow, pytest.mark.ray]

LEARNERS = ("parallel=distributed", "workers=4", "envs_per_worker=2", "algo.rollout_length=32", "learners=2",
            "checkpoint.every=0", "total_steps=1000000")
COMPARED = ("iteration", "env_steps", "loss_policy", "loss_value", "approx_kl")


@pytest.fixture(scope="module")
def cluster():
    with connected_cluster(nodes=2, cpus_per_node=1) as cluster:
        yield cluster


def weights(trainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.algorithm.model.state_dict().items()}


def test_one_learner_per_node_and_a_killed_rank_restarts_the_group(cluster, make_cfg, tmp_path):
    trainer = build_trainer(make_cfg(*LEARNERS, run_dir=tmp_path / "run"))
    try:
        group = trainer.algorithm.peers
        (node0, driver), (node1, victim) = group.locations
        assert driver == os.getpid() and node0 != node1  # rank 0 here, rank 1 on the other node
        rows = [trainer.train() for _ in range(3)]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while running(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        rows += [trainer.train() for _ in range(3)]
        (_, _), (node1_again, replacement) = group.locations
    finally:
        trainer.close()
    assert [r["learner_restarts"] for r in rows] == [0, 0, 0, 1, 1, 1]
    assert replacement not in (victim, None) and node1_again != node0
    logged = [json.loads(line)["iteration"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, 7))
    assert all(np.isfinite(r["loss_value"]) for r in rows)


def kill_the_first_new_rank(spared: int, deadline: float, killed: list) -> None:
    """SIGKILL the first `ray::LearnerRank` process of this test's cluster other than `spared`
    as soon as it appears (while its actor is still being built); its (pid, command) go to `killed`."""
    while time.monotonic() < deadline:
        for (pid, _), command in descendants_of(os.getpid()).items():
            if command.startswith("ray::LearnerRank") and pid != spared:
                os.kill(pid, signal.SIGKILL)
                killed.append((pid, command))
                return
        time.sleep(0.02)


def test_a_rank_lost_while_the_group_starts_again_is_one_more_restart(cluster, make_cfg, tmp_path):
    """IMPALA: rank 1 SIGKILLed, then its replacement while the group starts again (in
    LearnerRank.__init__): two restarts, both counted against learner_group.max_restarts, and
    the run goes on."""
    trainer = build_trainer(make_cfg(*LEARNERS, "algo=impala", run_dir=tmp_path / "run"))
    try:
        group = trainer.algorithm.peers
        (_, _), (_, victim) = group.locations
        rows = [trainer.train() for _ in range(2)]
        killed = []
        killer = threading.Thread(target=kill_the_first_new_rank, args=(victim, time.monotonic() + 60, killed))
        os.kill(victim, signal.SIGKILL)
        killer.start()
        rows += [trainer.train() for _ in range(2)]
        killer.join()
        (_, _), (_, survivor) = group.locations
    finally:
        trainer.close()
    assert len(killed) == 1 and survivor not in (victim, killed[0][0]), killed
    assert [r["learner_restarts"] for r in rows] == [0, 0, 2, 2]
    assert all(np.isfinite(r["loss_value"]) for r in rows)


def test_a_group_larger_than_the_cluster_is_refused_at_once(cluster, make_cfg, tmp_path):
    """Five bundles of 0.5 CPU on two nodes of 1 CPU: refused before any wait for room, in one line."""
    start = time.monotonic()
    with pytest.raises(LearnerGroupError) as refused:
        build_trainer(make_cfg(*LEARNERS, "learners=5", run_dir=tmp_path / "run"))
    assert time.monotonic() - start < PLACEMENT_TIMEOUT_S / 4
    assert str(refused.value) == ("learners=5: the Ray cluster (2 CPU on 2 node(s), 1 on this one) can hold at most 4 "
                                  "bundles of 0.5 CPU (ray.cpus_per_learner), one of them here; use fewer learners or "
                                  "a smaller ray.cpus_per_learner")


def test_a_checkpoint_of_two_learners_resumes_with_two_and_with_one(cluster, make_cfg, tmp_path):
    """Rank 0's state and rank 1's random state are in the checkpoint: learners=2 resumed has
    rank 1 go on with its own stream of shuffles where it stood; learners=1 goes on from the
    same weights and iteration. (On Ray the environments restart fresh, so batches differ.)"""
    straight = build_trainer(make_cfg(*LEARNERS, run_dir=tmp_path / "straight"))
    try:
        for _ in range(2):
            straight.train()
        path, saved = straight.save(), weights(straight)
        rank1_random_state = straight.algorithm.peers.rank_rngs[0]["numpy"]
    finally:
        straight.close()
    for learners, run in ((2, "two"), (1, "one")):
        resumed = build_trainer(make_cfg(*LEARNERS, f"learners={learners}", run_dir=tmp_path / run))
        try:
            resumed.restore(path)
            restored = weights(resumed)
            if learners == 2:  # the group meets before its first update: rank 1 as it stood at the checkpoint
                group = resumed.algorithm.peers
                group.join(resumed.algorithm)
                assert ray.get(group.actors[0].random_state.remote())["numpy"] == rank1_random_state
            rows = [resumed.train() for _ in range(2)]
        finally:
            resumed.close()
        assert all(torch.equal(restored[k], saved[k]) for k in saved)
        assert [r["iteration"] for r in rows] == [3, 4] and rows[0]["env_steps"] == 3 * 256
        assert all(np.isfinite(r["loss_value"]) for r in rows)
        assert ("learner_restarts" in rows[0]) == (learners == 2)
