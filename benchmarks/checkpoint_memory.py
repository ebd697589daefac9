"""Peak memory of saving a checkpoint that holds a 4M-transition replay (CartPole-sized, 183 MiB):
the save must not hold a second copy. Prints the process peak RSS before and after the save.

    .venv/bin/python benchmarks/checkpoint_memory.py
"""
import resource
import sys
import tempfile
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from rlpar.replay.shard import transition_fields
from rlpar.replay.storage import RingStorage
from rlpar.runtime.checkpoint import Checkpointer
storage = RingStorage(capacity=4_000_000, fields=transition_fields(4))
n = 4_000_000
for start in range(0, n, 1_000_000):
    storage.add({"obs": np.ones((1_000_000, 4), np.float32), "actions": np.ones(1_000_000, np.int64),
                 "rewards": np.ones(1_000_000, np.float32), "next_obs": np.ones((1_000_000, 4), np.float32),
                 "discounts": np.ones(1_000_000, np.float32)})
size_mb = storage.bytes_per_item * n / 2**20
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with tempfile.TemporaryDirectory() as d:
    Checkpointer(run_dir=d, every=1).save({"replay": storage.state_dict()}, 1)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"replay {size_mb:.0f} MiB; peak RSS before save {before:.0f} MiB, after {after:.0f} MiB (+{after - before:.0f} MiB)")
