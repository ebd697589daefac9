"""Numpy arrays in named shared memory: created by the learner, attached by worker processes."""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np


def create_shared_arrays(layout: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """Blocks and arrays for `layout` ({name: (shape, dtype)}); free with release_shared_arrays."""
    blocks = {
        key: shared_memory.SharedMemory(create=True, size=max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1))
        for key, (shape, dtype) in layout.items()
    }
    arrays = {key: np.ndarray(shape, dtype=dtype, buffer=blocks[key].buf) for key, (shape, dtype) in layout.items()}
    return blocks, arrays


def attach_shared_arrays(names: dict, layout: dict) -> tuple[list, dict[str, np.ndarray]]:
    """The arrays of blocks another process created (`names`: their names by key)."""
    blocks, arrays = [], {}
    for key, (shape, dtype) in layout.items():
        block = shared_memory.SharedMemory(name=names[key])
        blocks.append(block)
        arrays[key] = np.ndarray(shape, dtype=dtype, buffer=block.buf)
    return blocks, arrays


def release_shared_arrays(blocks: dict) -> None:
    """Close and unlink the blocks this process created."""
    for block in blocks.values():
        block.close()
        try:
            block.unlink()
        except FileNotFoundError:
            pass
