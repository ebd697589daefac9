"""Replay speed on CartPole-sized transitions, one `name: value unit` line per measurement.

    .venv/bin/python benchmarks/replay.py [--capacity 1000000] [--repeats 200]

Targets: prioritised sample + priority update of 512 from a full 1M buffer <= 1 ms (median);
inserts >= 1M transitions/s. One thread: the learner's process does this between updates.
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--insert-batch", type=int, default=1024)
    parser.add_argument("--sample-batch", type=int, default=512)
    args = parser.parse_args()
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
