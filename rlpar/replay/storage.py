"""Preallocated numpy ring buffer: where replayed transitions live.

One array per field, allocated once at full capacity, so a buffer that cannot fit fails at
construction (or earlier, through `required_bytes` in config validation) instead of hours into a
run. Writes go to a cursor that wraps around, oldest items first; indices are the slots, which
samplers use as keys for their own per-item state (priorities).
"""

from __future__ import annotations

import numpy as np

Fields = dict[str, tuple[tuple[int, ...], np.dtype]]


def _normalise_fields(fields) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    if not fields:
        raise ValueError("a replay storage needs at least one field")
    return {name: (tuple(int(d) for d in shape), np.dtype(dtype)) for name, (shape, dtype) in fields.items()}


class RingStorage:
    def __init__(self, *, capacity: int, fields: Fields):
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.fields = _normalise_fields(fields)
        # np.zeros: pages are only touched (and resident) once written.
        self._arrays = {name: np.zeros((self.capacity, *shape), dtype) for name, (shape, dtype) in self.fields.items()}
        self._cursor = 0
        self._size = 0

    @staticmethod
    def required_bytes(capacity: int, fields: Fields) -> int:
        """Bytes a full buffer takes, to refuse a configuration before anything is allocated."""
        return int(capacity) * RingStorage._item_bytes(_normalise_fields(fields))

    @staticmethod
    def _item_bytes(fields) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for shape, dtype in fields.values())

    @property
    def bytes_per_item(self) -> int:
        return self._item_bytes(self.fields)

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    def add(self, items: dict[str, np.ndarray]) -> np.ndarray:
        """Write a batch of items (every field, same leading length); returns their slots."""
        if set(items) != set(self.fields):
            raise ValueError(f"replay items have fields {sorted(items)}, the storage holds {sorted(self.fields)}")
        n = len(next(iter(items.values())))
        for name, (shape, _) in self.fields.items():
            if np.shape(items[name]) != (n, *shape):
                raise ValueError(f"replay field {name!r}: expected shape {(n, *shape)}, got {np.shape(items[name])}")
        if n > self.capacity:
            raise ValueError(f"a batch of {n} items does not fit a replay buffer of capacity {self.capacity}")
        start = self._cursor
        head = min(n, self.capacity - start)  # up to the end of the arrays, then the rest from slot 0
        for name, array in self._arrays.items():
            array[start : start + head] = items[name][:head]
            array[: n - head] = items[name][head:]
        self._cursor = (start + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        indices = np.arange(start, start + n, dtype=np.int64)
        if head < n:
            indices[head:] -= self.capacity
        return indices

    def get(self, indices) -> dict[str, np.ndarray]:
        """Copies of the items in these slots, field by field."""
        indices = np.asarray(indices, dtype=np.int64)
        return {name: array[indices] for name, array in self._arrays.items()}

    def column(self, name: str) -> np.ndarray:
        """One field's array over every slot (no copy: read it, do not write it)."""
        return self._arrays[name]

    # A ring keeps every item whole until it is overwritten (rlpar.replay.frames' storage may lose some earlier).
    def intact(self, indices) -> np.ndarray:
        return np.ones(np.shape(indices), bool)

    def take_lost(self) -> np.ndarray:
        return np.zeros(0, np.int64)

    def state_dict(self) -> dict:
        """Tensors sharing memory with the filled slots (a checkpoint must not copy a buffer that
        may hold most of the machine's memory); save it before the next `add`."""
        import torch  # the learner checkpoints; actors and shards need no torch

        return {
            "fields": {name: torch.from_numpy(array[: self._size]) for name, array in self._arrays.items()},
            "cursor": self._cursor,
            "size": self._size,
        }

    def load_state_dict(self, state: dict) -> None:
        saved = state["fields"]
        if set(saved) != set(self.fields):
            raise ValueError(f"checkpointed replay fields {sorted(saved)} differ from {sorted(self.fields)}")
        size, cursor = int(state["size"]), int(state["cursor"])
        if size > self.capacity or cursor >= self.capacity:
            raise ValueError(f"checkpointed replay of {size} items (cursor {cursor}) exceeds capacity {self.capacity}")
        for name, array in self._arrays.items():
            values = saved[name].numpy()
            if values.shape != (size, *self.fields[name][0]) or values.dtype != array.dtype:
                raise ValueError(
                    f"checkpointed replay field {name!r} is {values.dtype}{values.shape}, "
                    f"expected {array.dtype}{(size, *self.fields[name][0])}"
                )
            array[:size] = values
        self._size, self._cursor = size, cursor
