"""Replay speed on CartPole-sized transitions, one `name: value unit` line per measurement.

    .venv/bin/python benchmarks/replay.py [--capacity 1000000] [--repeats 200]

Targets: prioritised sample + priority update of 512 from a full 1M buffer <= 1 ms (median);
inserts >= 1M transitions/s. One thread: the learner's process does this between updates.

    .venv/bin/python benchmarks/replay.py --atari [--capacity 1000000] [--fill 100000] [--n-step 1]

Atari's replay (4 stacked 84x84 uint8 frames, rlpar.replay.frames: each frame stored once): a
replay of `--capacity` built as DQN builds it, filled with `--fill` transitions from an n-step
writer fed rollouts of 8 environments x 32 steps whose stacks shift and reset as
FrameStackObservation's do (random frames, episodes of 50-400 steps); the process's RSS before
and after (the replay's own memory), insert and sample speed. Target: 100k transitions in
under 1 GB of RSS.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from rlpar.replay import PrioritizedSampler, RingStorage, UniformSampler  # noqa: E402

FIELDS = {  # CartPole: 4 float32 observations, a discrete action
    "obs": ((4,), np.float32),
    "next_obs": ((4,), np.float32),
    "actions": ((), np.int64),
    "rewards": ((), np.float32),
    "discounts": ((), np.float32),
}


def transitions(rng, n):
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, n),
        "rewards": np.ones(n, np.float32),
        "discounts": np.full(n, 0.99, np.float32),
    }


def median_us(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * float(np.median(times))


def rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


def atari_rollouts(rng, *, num_envs=8, length=32, stack=4, side=84):
    """Endless rollouts laid out as rlpar's RolloutWorker gives them: obs before each step (the
    stacks FrameStackObservation makes: shifted by one frame a step, an episode's first stack
    its reset frame 4 times), valid False on the autoreset step after an episode's end."""
    frame = side * side
    stacks = np.repeat(rng.integers(0, 256, (num_envs, 1, frame), dtype=np.uint8), stack, axis=1)
    left = rng.integers(50, 400, num_envs)  # steps to the episode's end
    pending = np.zeros(num_envs, bool)
    while True:
        obs = np.empty((length, num_envs, stack * frame), np.uint8)
        valid, ended = np.empty((length, num_envs), bool), np.zeros((length, num_envs), bool)
        for t in range(length):
            obs[t], valid[t] = stacks.reshape(num_envs, -1), ~pending
            new = rng.integers(0, 256, (num_envs, frame), dtype=np.uint8)
            stacks = np.concatenate([stacks[:, 1:], new[:, None]], axis=1)
            stacks[pending] = np.repeat(new[pending][:, None], stack, axis=1)  # the autoreset step's reset stack
            left[pending] = rng.integers(50, 400, pending.sum())
            left -= ~pending
            ended[t] = ~pending & (left <= 0)
            pending = ended[t].copy()
        yield dict(obs=obs, actions=rng.integers(0, 4, (length, num_envs)), rewards=np.zeros((length, num_envs), np.float32),
                   terminated=ended, truncated=np.zeros_like(ended), valid=valid, env_ids=np.arange(num_envs),
                   last_obs=stacks.reshape(num_envs, -1).copy())


def atari(args):
    from rlpar.envs.spaces import describe_observation_space
    from rlpar.replay import NStepWriter
    from rlpar.replay.frames import replay_storage
    from rlpar.replay.settings import ReplaySettings
    from rlpar.replay.shard import transition_fields

    import gymnasium as gym

    observation = describe_observation_space(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    settings = ReplaySettings(capacity=args.capacity, frames=not args.whole_stacks)
    stack = settings.frame_stack(observation)
    fields = transition_fields(observation.obs_dim, observation.obs_dtype)
    estimate = args.capacity * ReplaySettings.bytes_per_transition(
        observation.obs_dim, observation.obs_dtype, image_shape=observation.image_shape, frames=settings.frames)
    print(f"layout: {'frames once' if stack else 'whole stacks'}; memory estimate for capacity={args.capacity}: "
          f"{estimate / 2**30:.2f} GiB")
    rng = np.random.default_rng(0)
    rollouts = atari_rollouts(rng)
    writer = NStepWriter(n=args.n_step, gamma=0.99)
    chunks = [writer.add(**next(rollouts)) for _ in range(-(-args.fill // 256) + 8)]  # made before measuring
    before = rss_bytes()
    storage = replay_storage(capacity=args.capacity, fields=fields, stack=stack,
                             frames_per_transition=settings.frames_per_transition)
    names = list(storage.fields)
    filled, spent = 0, 0.0
    for chunk in chunks:
        if filled >= args.fill:
            break
        start = time.perf_counter()
        storage.add({name: chunk[name] for name in names})
        spent += time.perf_counter() - start
        filled += len(chunk["actions"])
    after = rss_bytes()
    print(f"filled: {filled} transitions; replay RSS: {(after - before) / 2**20:.0f} MiB "
          f"({(after - before) / filled:.0f} B per transition)")
    if stack:
        print(f"frames stored: {storage.frames_stored} ({storage.frames_stored / filled:.3f} per transition)")
    print(f"insert: {filled / spent:.3g} transitions/s")
    sampler = UniformSampler(seed=0)
    print(f"uniform sample + get batch={args.sample_batch}: "
          f"{median_us(lambda: storage.get(sampler.sample(batch_size=args.sample_batch, size=storage.size)[0]), args.repeats):.0f} us")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--insert-batch", type=int, default=1024)
    parser.add_argument("--sample-batch", type=int, default=512)
    parser.add_argument("--atari", action="store_true", help="Atari's replay: RSS after --fill transitions")
    parser.add_argument("--fill", type=int, default=100_000)
    parser.add_argument("--n-step", type=int, default=1)
    parser.add_argument("--whole-stacks", action="store_true", help="with --atari: algo.replay.frames=false")
    args = parser.parse_args()
    if args.atari:
        return atari(args)
    capacity, insert_batch, batch = args.capacity, args.insert_batch, args.sample_batch
    rng = np.random.default_rng(0)

    storage = RingStorage(capacity=capacity, fields=FIELDS)
    prioritized = PrioritizedSampler(capacity=capacity, beta_steps=100_000, seed=0)
    print(f"bytes per transition: {storage.bytes_per_item} B")
    print(f"buffer capacity={capacity}: {RingStorage.required_bytes(capacity, FIELDS) / 2**20:.1f} MiB")

    # Storage writes plus the new items' priorities, as a prioritised buffer inserts: first into
    # fresh memory (page faults included), then over a full buffer, as in a long run.
    chunks = [transitions(rng, insert_batch) for _ in range(16)]

    def insert(count):
        both = storage_only = 0.0
        for i in range(count):
            start = time.perf_counter()
            slots = storage.add(chunks[i % len(chunks)])
            middle = time.perf_counter()
            prioritized.on_insert(slots)
            both += time.perf_counter() - start
            storage_only += middle - start
        return count * insert_batch / both, count * insert_batch / storage_only

    filling, filling_storage = insert(-(-capacity // insert_batch))
    print(f"insert batch={insert_batch}: {filling:.3g} transitions/s")
    print(f"insert batch={insert_batch} storage only: {filling_storage:.3g} transitions/s")
    full, _ = insert(max(1, capacity // (4 * insert_batch)))
    print(f"insert batch={insert_batch} into a full buffer: {full:.3g} transitions/s")
    # Spread the priorities, as after training: every item its own TD error.
    for first in range(0, capacity, 65536):
        idx = np.arange(first, min(first + 65536, capacity))
        prioritized.update_priorities(idx, rng.exponential(size=len(idx)))

    td_errors = rng.normal(size=batch)

    def prioritized_step():
        indices, weights = prioritized.sample(batch_size=batch, size=storage.size)
        storage.get(indices)
        prioritized.update_priorities(indices, td_errors)

    uniform = UniformSampler(seed=0)

    def uniform_step():
        indices, weights = uniform.sample(batch_size=batch, size=storage.size)
        storage.get(indices)

    def prioritized_sample_only():
        prioritized.sample(batch_size=batch, size=storage.size)

    def prioritized_update_only():
        prioritized.update_priorities(rng.integers(0, capacity, batch), td_errors)

    for fn in (prioritized_step, uniform_step):  # warm caches and allocator
        for _ in range(20):
            fn()
    measured = [("prioritized sample+update", prioritized_step), ("prioritized sample only", prioritized_sample_only),
                ("prioritized update only", prioritized_update_only), ("uniform sample", uniform_step)]
    for name, fn in measured:
        print(f"{name} batch={batch} capacity={capacity}: {median_us(fn, args.repeats):.0f} us")


if __name__ == "__main__":
    main()
