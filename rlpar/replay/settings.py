"""The `algo.replay` node of value-based algorithms: what the replay keeps and how it samples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlpar.typed_config import flag, integer, number


@dataclass(frozen=True)
class ReplaySettings:
    capacity: int = integer(100_000, low=1)  # transitions kept (oldest overwritten)
    prioritized: bool = flag(False)  # proportional prioritisation (Schaul et al. 2016); else uniform
    alpha: float = number(0.6, low=0, high=1)  # priority exponent
    beta_start: float = number(0.4, low=0, high=1)  # importance-sampling exponent, annealed to beta_end
    beta_end: float = number(1.0, low=0, high=1)
    checkpoint: bool = flag(False)  # DQN: save the contents with every checkpoint (exact resume)
    num_shards: int = integer(2, low=1, optional=True)  # Ape-X: replay shards (Ray actors with parallel=distributed)
    # Ape-X: each shard's rate limiter holds sampled items per inserted transition at
    # samples_per_insert (null: replay_ratio x batch_size) within rate_tolerance sampled items
    # (null: the least that cannot deadlock plus room for every actor's unanswered
    # writes).
    samples_per_insert: float | None = number(None, low=0, low_open=True, optional=True)
    rate_tolerance: float | None = number(None, low=0, low_open=True, optional=True)
    # uint8 image stacks (Atari's 4 x 84 x 84): each frame stored once, stacks rebuilt when sampled
    # (rlpar.replay.frames), in frames_per_transition frame slots per transition; false: whole stacks.
    frames: bool = flag(True)
    frames_per_transition: float = number(1.125, low=1, low_open=True, optional=True)

    def frame_stack(self, policy_spec) -> int:
        """Frames per observation to store once (rlpar.replay.frames.frame_stack), 0: whole rows."""
        from rlpar.replay.frames import frame_stack

        return (
            frame_stack(
                obs_dtype=policy_spec.obs_dtype,
                image_shape=getattr(policy_spec, "image_shape", ()),
                channels_last=getattr(policy_spec, "channels_last", False),
            )
            if self.frames
            else 0
        )

    @staticmethod
    def bytes_per_transition(
        obs_dim: int,
        obs_dtype: str = "float32",
        *,
        image_shape=(),
        channels_last: bool = False,
        frames: bool = True,
        frames_per_transition: float = 1.125,
    ) -> int:
        """A stored transition (the replay's own field layout: whole rows, or its share of the
        frames kept once) and a float64 priority in each of the sum tree's two halves: what the
        memory estimate charges per unit of capacity."""
        from rlpar.replay.frames import FrameStorage, frame_stack
        from rlpar.replay.shard import transition_fields
        from rlpar.replay.storage import RingStorage

        fields = transition_fields(obs_dim, obs_dtype)
        stack = frame_stack(obs_dtype=obs_dtype, image_shape=image_shape, channels_last=channels_last)
        if frames is True and stack:
            if isinstance(frames_per_transition, bool) or not isinstance(frames_per_transition, (int, float)):
                frames_per_transition = 1.125  # refused on its own line
            stored = FrameStorage.bytes_per_item(fields, stack, max(frames_per_transition, 1.0))
        else:
            stored = RingStorage.required_bytes(1, fields)
        return int(np.ceil(stored)) + 2 * 8

    @classmethod
    def config_problems(cls, config) -> list[str]:
        """`algo.replay` against the algorithm and the sampler, beyond its fields' types and
        ranges; `config`: a rlpar.config.validate.ConfigView."""
        capacity = _positive(config.get("algo.replay.capacity"))
        problems = _rate_limiter_problems(config) + _sequence_problems(config, capacity)
        for name in ("batch_size", "learning_starts"):
            value = config.get(f"algo.{name}")
            if isinstance(capacity, int) and isinstance(value, int) and value > capacity:
                problems.append(f"algo.{name}: {value} is more than algo.replay.capacity ({capacity})")
        if config.algorithm.get("replay_in_checkpoints") is False and config.get("algo.replay.checkpoint"):
            problems.append(
                f"algo.replay.checkpoint: algo={config.get('algo.name')}'s replay is not checkpointed (a "
                f"resumed run refills it); drop the key"
            )
        return problems


def _sequence_problems(config, capacity) -> list[str]:
    """A recurrent Q-network's replayed sequences (rlpar.replay.sequences): a new one every
    algo.sequence_length // 2 steps, so `capacity` env steps hold capacity / (sequence_length // 2)
    of them, and a minibatch draws `batch_size`."""
    length, batch_size = config.get("algo.sequence_length"), config.get("algo.batch_size")
    if not config.get("model.recurrent") or not all(isinstance(x, int) for x in (length, capacity, batch_size)):
        return []
    if length < 2:
        return [
            f"algo.sequence_length: {length} is too short for sequence replay (at least 2: a new sequence "
            f"starts every sequence_length // 2 steps)"
        ]
    if batch_size > capacity // (length // 2):
        return [
            f"algo.batch_size: {batch_size} sequences is more than the replay holds (algo.replay.capacity "
            f"{capacity} steps / a new sequence every {length // 2} steps = {capacity // (length // 2)})"
        ]
    return []


def _rate_limiter_problems(config) -> list[str]:
    """Each shard's limiter: a tolerance below the least that cannot deadlock is refused."""
    from rlpar.replay.nstep import most_transitions_per_rollout
    from rlpar.replay.rate_limiter import least_tolerance

    ratio = _positive(config.get("algo.replay.samples_per_insert"))
    tolerance = _positive(config.get("algo.replay.rate_tolerance"))
    if tolerance is None:
        return []
    if ratio is None:
        replay_ratio, batch_size = config.get("algo.replay_ratio"), config.get("algo.batch_size")
        ratio = (
            replay_ratio * batch_size
            if isinstance(replay_ratio, (int, float)) and isinstance(batch_size, int)
            else None
        )
    workers, envs_per_worker = config.get("workers"), config.get("envs_per_worker")
    rollout, n_step, batch_size = (config.get(f"algo.{k}") for k in ("rollout_length", "n_step", "batch_size"))
    numbers = (ratio, workers, envs_per_worker, rollout, n_step, batch_size)
    if not all(isinstance(x, (int, float)) and x > 0 for x in numbers):
        return []  # reported by their own checks
    in_learner = config.sampler is not None and config.sampler.in_learner_process
    insert_batch = most_transitions_per_rollout(
        num_envs=envs_per_worker * (workers if in_learner else 1), rollout_length=rollout, n=n_step
    )
    least = least_tolerance(samples_per_insert=ratio, insert_batch=insert_batch, sample_batch=batch_size)
    if tolerance < least:
        return [
            f"algo.replay.rate_tolerance: {tolerance} could deadlock; with samples_per_insert {ratio:g}, writes of "
            f"up to {insert_batch} transitions and minibatches of {batch_size} it must be at least {least:g} (or null)"
        ]
    return []


def _positive(value):
    """`value` where it is a positive number (else refused by its field's check), or None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
