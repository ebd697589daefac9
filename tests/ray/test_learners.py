"""learners=2 on a real two-node Ray cluster on 127.0.0.1 (one per module): one rank per node, a
rank's process killed mid-run, and checkpoints that resume with the same and another N."""

import json
import os
import signal
import time

import numpy as np
import pytest
import ray
import torch

from rlpar.runtime.build import build_trainer
from tests.processes import running
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
        group = trainer.algorithm.learner_group
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


def test_a_checkpoint_of_two_learners_resumes_with_two_and_with_one(cluster, make_cfg, tmp_path):
    """Rank 0's state and rank 1's random state are in the checkpoint: learners=2 resumed has
    rank 1 go on with its own stream of shuffles where it stood; learners=1 goes on from the
    same weights and iteration. (On Ray the environments restart fresh, so batches differ.)"""
    straight = build_trainer(make_cfg(*LEARNERS, run_dir=tmp_path / "straight"))
    try:
        for _ in range(2):
            straight.train()
        path, saved = straight.save(), weights(straight)
        rank1_random_state = straight.algorithm.learner_group.rank_rngs[0]["numpy"]
    finally:
        straight.close()
    for learners, run in ((2, "two"), (1, "one")):
        resumed = build_trainer(make_cfg(*LEARNERS, f"learners={learners}", run_dir=tmp_path / run))
        try:
            resumed.restore(path)
            restored = weights(resumed)
            if learners == 2:  # the group meets before its first update: rank 1 as it stood at the checkpoint
                group = resumed.algorithm.learner_group
                group.join(resumed.algorithm)
                assert ray.get(group.actors[0].random_state.remote())["numpy"] == rank1_random_state
            rows = [resumed.train() for _ in range(2)]
        finally:
            resumed.close()
        assert all(torch.equal(restored[k], saved[k]) for k in saved)
        assert [r["iteration"] for r in rows] == [3, 4] and rows[0]["env_steps"] == 3 * 256
        assert all(np.isfinite(r["loss_value"]) for r in rows)
        assert ("learner_restarts" in rows[0]) == (learners == 2)
