"""The convolutional encoders of modules/encoders.py in numpy, from the torch module's state dict, so
workers acting with a CNN need not import torch.

Activations stay channels-last ([N, H, W, C]) between layers: a convolution is one im2col copy
(a strided window view of the input, its kernel rows gathered contiguously) and one matmul with
the kernel reshaped to match, whose output is already channels-last. The first layer reads the
uint8 bytes as they arrive (H, W, C rows, or C, H, W ones) and gathers its windows from the
bytes, 8 times less to copy than doubles; the 1/255 scaling is folded into its kernel. The fc
layer's weight is permuted once, at `set_weights`, from torch's C, H, W flattening order to
this H, W, C one.

float64 by default, as every numpy acting copy here: results then do not depend on the batch size
(see NumpyPolicy.outputs). `dtype=np.float32` is `acting=numpy32` (and the measurements below).

Measured (2-core AMD EPYC VM, one thread, numpy 2.4 with OpenBLAS, torch 2.13 CPU in
inference_mode; one `act` call: encoder, heads and action choice; best of 7 timings):

    ms per step          N obs   numpy f64   numpy f32   torch f32
    nature (4, 84, 84)     1        0.63        0.35        0.37
                           4        2.9         1.2         0.81
                           8        4.9         2.3         1.3
    impala (4, 84, 84)     1        4.2         2.3         2.7
                           4       15.2         8.4         8.1
                           8       34.7        15.7        15.1
    small (5, 5, 3)        1        0.085       0.079       0.068
                           4        0.13        0.10        0.14
                           8        0.17        0.12        0.15

Batch-size independence, a row alone or in pairs against the same row in a batch of 8: numpy f64,
bit-identical float32 results for all three encoders; numpy f32 and torch f32 differ in 17-46% of
the features (by ~1e-6 relative; torch's happen to agree for two batches of 4).

Hence `acting=auto` (rlpar.models.spec.choose_acting): this numpy f64 copy for `small` (as fast as
torch at a handful of pixels, torch-free workers, identical batches however environments are split)
and the torch f32 copy (torch_acting.py) for `nature` and `impala`, 2-4x faster per step, at
the price of batches that depend on the split (`acting=numpy` restores that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlpar.models.acting.numpy_acting import PolicyChoice
from rlpar.models.cnn_shapes import IMPALA_CHANNELS, nature_size, pool_size

if TYPE_CHECKING:  # the spec builds these classes: importing it here would be a circle
    from rlpar.models.spec import PolicySpec

window_view = np.lib.stride_tricks.sliding_window_view


class _Conv:
    """One convolution: kernel [K, O] in the column order its im2col produces, and bias [O]."""

    def __init__(
        self,
        weight: np.ndarray,
        bias: np.ndarray,
        stride: int,
        padding: int,
        dtype,
        channels_first_input: bool = False,
        scale: float = 1.0,
    ):
        weight = np.asarray(weight, np.float64)
        self.out, self.channels, self.kh, self.kw = weight.shape
        self.stride, self.padding, self.channels_first_input = stride, padding, channels_first_input
        # columns ordered (C, kh, kw) when gathered from a [N, C, H, W] input, (kh, kw, C) from [N, H, W, C]
        order = (0, 1, 2, 3) if channels_first_input else (0, 2, 3, 1)
        self.kernel = np.ascontiguousarray((weight * scale).transpose(order).reshape(self.out, -1).T, dtype)
        self.bias = np.asarray(bias, dtype)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """[N, H, W, C] (or [N, C, H, W] for a channels-first first layer) -> [N, H', W', O]."""
        s, p = self.stride, self.padding
        if self.channels_first_input:
            if p:
                x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
            windows = window_view(x, (self.kh, self.kw), axis=(2, 3))[:, :, ::s, ::s]  # [N, C, H', W', kh, kw]
            windows = windows.transpose(0, 2, 3, 1, 4, 5)
        else:
            if p:
                x = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
            windows = window_view(x, (self.kh, self.kw), axis=(1, 2))[:, ::s, ::s]  # [N, H', W', C, kh, kw]
            windows = windows.transpose(0, 1, 2, 4, 5, 3)
        n, h, w = windows.shape[:3]
        columns = windows.reshape(n * h * w, -1)  # the one copy
        if columns.dtype != self.kernel.dtype:
            columns = columns.astype(self.kernel.dtype)
        out = columns @ self.kernel
        out += self.bias
        return out.reshape(n, h, w, self.out)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def _max_pool(x: np.ndarray) -> np.ndarray:
    """3x3, stride 2, padding 1 (padded with -inf, as torch's max_pool2d), channels-last."""
    n, h, w, c = x.shape
    ho, wo = pool_size(h), pool_size(w)
    padded = np.full((n, h + 2, w + 2, c), -np.inf, x.dtype)
    padded[:, 1:-1, 1:-1] = x
    out = padded[:, 0 : 2 * ho : 2, 0 : 2 * wo : 2].copy()
    for i in range(3):
        for j in range(3):
            if i or j:
                np.maximum(out, padded[:, i : i + 2 * ho : 2, j : j + 2 * wo : 2], out=out)
    return out


class _Linear:
    def __init__(self, weight, bias, dtype, hwc: tuple[int, int, int] | None = None):
        """`hwc`: the input is a channels-last map of this shape, which torch flattened as C, H, W."""
        weight = np.asarray(weight, np.float64)
        if hwc is not None:
            h, w, c = hwc
            weight = weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(len(weight), -1)
        self.kernel = np.ascontiguousarray(weight.T, dtype)
        self.bias = np.asarray(bias, dtype)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = x.reshape(len(x), -1) @ self.kernel
        out += self.bias
        return out


class NumpyEncoder:
    """`encoder(rows)`: uint8 rows [N, obs_dim] -> features [N, F] (dtype), from the weights
    under `prefix` of a state dict holding a modules/encoders.py module."""

    def __init__(self, name: str, image_shape: tuple[int, ...], channels_last: bool, dtype=np.float64):
        self.name, self.image_shape, self.channels_last = name, tuple(image_shape), channels_last
        self.dtype = dtype
        self.layers: list = []

    def set_weights(self, weights: dict, prefix: str = "encoder.") -> None:
        c, h, w = self.image_shape
        dtype, first = self.dtype, dict(channels_first_input=not self.channels_last, scale=1.0 / 255.0)

        def conv(name, stride=1, padding=0, **options):
            return _Conv(
                weights[f"{prefix}{name}.weight"], weights[f"{prefix}{name}.bias"], stride, padding, dtype, **options
            )

        if self.name == "nature":
            self.layers = [conv("conv1", 4, **first), conv("conv2", 2), conv("conv3", 1)]
            h, w = nature_size(h), nature_size(w)
            c = self.layers[-1].out
        elif self.name == "small":
            self.layers = [conv("conv0", 1, 1, **first), conv("conv1", 1, 1)]
            c = self.layers[-1].out
        elif self.name == "impala":
            self.layers = []
            for i in range(len(IMPALA_CHANNELS)):
                options = first if i == 0 else {}
                stack = [conv(f"stacks.{i}.conv", 1, 1, **options)]
                stack += [conv(f"stacks.{i}.res{r}.conv{k}", 1, 1) for r in (0, 1) for k in (0, 1)]
                self.layers.append(stack)
                c, h, w = stack[0].out, pool_size(h), pool_size(w)
        else:
            raise ValueError(f"unknown image encoder '{self.name}'")
        self.fc = _Linear(weights[f"{prefix}fc.weight"], weights[f"{prefix}fc.bias"], dtype, hwc=(h, w, c))

    def image(self, rows: np.ndarray) -> np.ndarray:
        """The rows as the first layer reads them: [N, H, W, C] or [N, C, H, W], still uint8."""
        c, h, w = self.image_shape
        return rows.reshape(len(rows), h, w, c) if self.channels_last else rows.reshape(len(rows), c, h, w)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        x = self.image(rows)
        if self.name == "impala":
            for conv, *residual in self.layers:
                x = _max_pool(conv(x))
                for conv0, conv1 in (residual[:2], residual[2:]):
                    x = x + conv1(_relu(conv0(np.maximum(x, 0.0))))
            x = np.maximum(x, 0.0)
        else:
            for layer in self.layers:
                x = _relu(layer(x))
        return _relu(self.fc(x))


class NumpyCNNPolicy(PolicyChoice):
    """The acting copy of cnn.CNNActorCritic: the numpy encoder, then both heads as one matmul;
    actions chosen by PolicyChoice (numpy_acting.py). Images are never whitened: `normalize` is
    the identity, and observations stay uint8."""

    def __init__(self, spec: PolicySpec, dtype=np.float64):
        super().__init__(spec.action, dtype)
        self.spec = spec
        self.encoder = NumpyEncoder(spec.chosen_encoder, spec.image_shape, spec.channels_last, dtype)

    def set_weights(self, weights: dict) -> None:
        self.encoder.set_weights(weights)
        kernel = np.concatenate(
            [np.asarray(weights["actor.weight"], np.float64), np.asarray(weights["critic.weight"], np.float64)]
        )  # [A + 1, F]
        self.heads = np.ascontiguousarray(kernel.T, self.encoder.dtype)
        self.heads_bias = np.concatenate([weights["actor.bias"], weights["critic.bias"]]).astype(self.encoder.dtype)
        self.set_choice_weights(weights)

    def outputs(self, obs: np.ndarray, state=None):
        """Actor outputs [N, A] and values [N], in the encoder's dtype."""
        x = self.encoder(obs) @ self.heads
        x += self.heads_bias
        return x[:, :-1], x[:, -1]
