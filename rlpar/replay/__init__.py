"""Experience replay for DQN and Ape-X, built from small parts (TorchRL's storage x sampler x
writer, with a Reverb-style rate limiter):

- `RingStorage`: preallocated numpy arrays, one per field; `add` returns the slots written.
  `FrameStorage` (rlpar.replay.frames), the same calls for uint8 image stacks (Atari): each
  frame stored once, stacks rebuilt by `get`; items whose frames were overwritten are reported
  by `take_lost` for the sampler to `forget`.
- `UniformSampler` / `PrioritizedSampler`: choose slots to replay and their importance weights;
  the prioritised one keeps a `SumTree` of priorities keyed by slot.
- `NStepWriter`: turns rollouts ([T, N] batches) into n-step transitions, following each
  environment across rollouts by its global id.
- `RateLimiter`: keeps samples per insert near a target, so replay ratio does not depend on how
  fast actors run against the learner.
- `ReplayTable` (storage, prioritised sampler and limiter) and `ReplayShard`, the asynchronous
  Ray actor serving one table (rlpar.replay.shard); `PrioritizingWorker`, Ape-X's actor.

DQN's learner owns one replay in its process and keeps the replay ratio itself; Ape-X's tables
compose them as:

    transitions = writer.add(**rollout_fields)               # actors' rollouts -> transitions
    if limiter.can_insert(n): slots = storage.add(transitions); sampler.on_insert(slots)
                              sampler.forget(storage.take_lost())
                              limiter.record_insert(n)
    if limiter.can_sample(b): slots, weights = sampler.sample(batch_size=b, size=storage.size)
                              limiter.record_sample(b)
                              batch = storage.get(slots); ...; sampler.update_priorities(slots, td)

Each part has state_dict / load_state_dict returning tensors and plain values, for checkpoints
loaded with weights_only.
"""

from rlpar.replay.frames import FrameStorage
from rlpar.replay.nstep import NStepWriter
from rlpar.replay.rate_limiter import RateLimiter
from rlpar.replay.samplers import PrioritizedSampler, UniformSampler
from rlpar.replay.storage import RingStorage
from rlpar.replay.sum_tree import SumTree

__all__ = [
    "FrameStorage",
    "NStepWriter",
    "PrioritizedSampler",
    "RateLimiter",
    "RingStorage",
    "SumTree",
    "UniformSampler",
]
