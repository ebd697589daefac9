"""Ape-X's actor: a rollout worker that prioritises its own experience.

Each rollout becomes n-step transitions (followed per global environment id) whose initial
priorities its acting copy gives (`replay_priorities`: a Q-network's |n-step TD error| under the
actor's own copy, so a new transition enters the replay with a meaningful priority instead of
the maximum, Horgan et al. 2018). The shards' addresses (rlpar.sampling.services) come with the
weights: shards that serve while the learner works (Ray actors, parallel=distributed) the actor writes to itself,
round-robin, and the learner only sees episode statistics; otherwise (shards in the learner's
process) the transitions travel back with the batch (`Batch.extras`) to the learner.
Numpy only: no torch in actors.
"""

from __future__ import annotations

import time

import numpy as np

from rlpar.errors import ServiceLost
from rlpar.learning.estimators.rewards import clip_rewards
from rlpar.replay.nstep import NStepWriter
from rlpar.sampling.rollout import RolloutWorker

MAX_WRITES_IN_FLIGHT = 2  # per actor: backpressure when the shards fall behind
RETRY_S = (0.001, 0.02)  # pause before offering a refused write again: doubling from the first to the second


class PrioritizingWorker(RolloutWorker):
    def __init__(
        self,
        *,
        n_step: int,
        gamma: float,
        reward_clip: float | None = None,
        reward_scale: float = 1.0,
        **rollout_kwargs,
    ):
        super().__init__(**rollout_kwargs)
        self.reward_clip, self.reward_scale = reward_clip, np.float32(reward_scale)
        self.writer = NStepWriter(n=n_step, gamma=gamma)
        self.shards: list = []  # addresses of the shards this actor writes to itself
        self.writes_in_flight: list = []  # (shard, its arguments, the request)
        self.rollouts = 0

    def set_weights(self, weights: dict, version: int) -> None:
        super().set_weights(weights, version)
        shards = weights.get("replay_shards", [])  # new addresses after a shard was restarted
        self.shards = shards if all(shard is not None and shard.concurrent for shard in shards) else []

    def sample(self, out=None):
        batch = super().sample(out)
        rewards = clip_rewards(batch.rewards, self.reward_clip) * self.reward_scale
        transitions = self.writer.add(
            obs=batch.obs,
            actions=batch.actions,
            rewards=rewards,
            terminated=batch.terminated,
            truncated=batch.truncated,
            valid=batch.valid,
            env_ids=batch.env_ids,
            last_obs=batch.last_obs,
        )
        count = len(transitions["actions"])
        if count == 0:
            batch.extras = {"written": [0]}
        elif self.shards:
            waited = self.write(transitions, self.policy.replay_priorities(transitions))
            batch.extras = {"written": [count], "insert_wait_s": [waited]}
        else:
            batch.extras = {"transitions": [transitions], "priorities": [self.policy.replay_priorities(transitions)]}
        return batch

    def write(self, transitions: dict, priorities: np.ndarray) -> float:
        """To the next shard in turn, without waiting for it unless more than
        MAX_WRITES_IN_FLIGHT are unanswered; a write the shard's rate limiter refused is offered
        again until taken. Returns the seconds spent waiting. A write to a shard that died is
        lost; the learner restarts the shard and sends its new address."""
        shard = self.shards[(self.first_env_index + self.rollouts) % len(self.shards)]
        self.rollouts += 1
        arguments = (transitions, priorities)
        self.writes_in_flight.append((shard, arguments, shard.request("add", *arguments)))
        began = time.perf_counter()
        while len(self.writes_in_flight) > MAX_WRITES_IN_FLIGHT:
            shard, arguments, request = self.writes_in_flight.pop(0)
            pause = RETRY_S[0]
            try:
                while shard.answer(request) is None:
                    time.sleep(pause)
                    pause = min(2 * pause, RETRY_S[1])
                    request = shard.request("add", *arguments)
            except ServiceLost:
                pass  # the shard died
        return time.perf_counter() - began
