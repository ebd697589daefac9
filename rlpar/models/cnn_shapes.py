"""The encoders' sizes, importable without torch (modules/encoders.py builds them, acting/numpy_cnn.py runs them)."""

from __future__ import annotations

CNN_ENCODERS = ("nature", "impala", "small")
NATURE_FEATURES, IMPALA_FEATURES = 512, 256
IMPALA_CHANNELS = (16, 32, 32)
SMALL_CHANNELS = (16, 32)


def conv_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def pool_size(size: int) -> int:
    """Height or width after IMPALA's 3x3/2 max-pool with padding 1."""
    return conv_size(size, 3, 2, 1)


def nature_size(size: int) -> int:
    """Height or width after the Nature network's three convolutions."""
    return conv_size(conv_size(conv_size(size, 8, 4), 4, 2), 3, 1)


def small_features(hidden_sizes: tuple[int, ...]) -> int:
    """The small encoder's fc width: the model's last hidden size (128 without one)."""
    return hidden_sizes[-1] if hidden_sizes else 128
