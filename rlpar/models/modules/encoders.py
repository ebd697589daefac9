"""Convolutional encoders for image observations (learner side), shared by the actor-critic
(cnn.py) and the Q-network (q_network.py). `acting/numpy_cnn.py` runs the same networks from their state
dicts: keep the two in step.

- `nature`: Mnih et al. 2015 (DQN): 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, fc 512.
- `impala`: Espeholt et al. 2018 (IMPALA's ResNet): three stacks of 16, 32, 32 channels, each a
  3x3 convolution, a 3x3/2 max-pool and two residual blocks (relu, conv, relu, conv, plus the
  input); then relu and fc 256.
- `small`: two 3x3 convolutions (16 and 32 channels, padding 1, so every pixel of a few-pixel
  grid world keeps its place), fc of the model's last hidden size.

All use relu, whatever the model's `activation` (which is the MLP's), and CleanRL's init:
orthogonal with gain sqrt(2), zero biases.

Rows arrive as uint8 bytes ([N, obs_dim], an image's array flattened as the env gives it: H, W, C
for channels-last images); `image_batch` makes them [N, C, H, W] floats in [0, 1], on the
learner's device, so only bytes cross process and device boundaries.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from rlpar.models.cnn_shapes import (
    CNN_ENCODERS,
    IMPALA_CHANNELS,
    IMPALA_FEATURES,
    NATURE_FEATURES,
    SMALL_CHANNELS,
    nature_size,
    pool_size,
    small_features,
)


def image_batch(obs: torch.Tensor, image_shape: tuple[int, ...], channels_last: bool) -> torch.Tensor:
    """uint8 rows [N, obs_dim] -> float images [N, C, H, W] in [0, 1]."""
    c, h, w = image_shape
    x = obs.to(torch.float32) / 255.0
    if channels_last:
        return x.reshape(-1, h, w, c).permute(0, 3, 1, 2)
    return x.reshape(-1, c, h, w)


def orthogonal_init(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight, gain)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


class NatureEncoder(nn.Module):
    def __init__(self, image_shape: tuple[int, ...]):
        super().__init__()
        c, h, w = image_shape
        self.conv1 = nn.Conv2d(c, 32, 8, stride=4)
        self.conv2 = nn.Conv2d(32, 64, 4, stride=2)
        self.conv3 = nn.Conv2d(64, 64, 3, stride=1)
        self.fc = nn.Linear(64 * nature_size(h) * nature_size(w), NATURE_FEATURES)
        self.features = NATURE_FEATURES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        return F.relu(self.fc(x.flatten(1)))


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ImpalaStack(nn.Module):
    def __init__(self, in_channels: int, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.res0 = ResidualBlock(channels)
        self.res1 = ResidualBlock(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.conv(x), 3, stride=2, padding=1)
        return self.res1(self.res0(x))


class ImpalaEncoder(nn.Module):
    def __init__(self, image_shape: tuple[int, ...]):
        super().__init__()
        c, h, w = image_shape
        stacks = []
        for channels in IMPALA_CHANNELS:
            stacks.append(ImpalaStack(c, channels))
            c, h, w = channels, pool_size(h), pool_size(w)
        self.stacks = nn.ModuleList(stacks)
        self.fc = nn.Linear(c * h * w, IMPALA_FEATURES)
        self.features = IMPALA_FEATURES

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stack in self.stacks:
            x = stack(x)
        return F.relu(self.fc(F.relu(x).flatten(1)))


class SmallEncoder(nn.Module):
    def __init__(self, image_shape: tuple[int, ...], features: int):
        super().__init__()
        c, h, w = image_shape
        self.conv0 = nn.Conv2d(c, SMALL_CHANNELS[0], 3, padding=1)
        self.conv1 = nn.Conv2d(SMALL_CHANNELS[0], SMALL_CHANNELS[1], 3, padding=1)
        self.fc = nn.Linear(SMALL_CHANNELS[1] * h * w, features)
        self.features = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(F.relu(self.conv0(x))))
        return F.relu(self.fc(x.flatten(1)))


def build_encoder(
    name: str, image_shape: tuple[int, ...], hidden_sizes: tuple[int, ...]
) -> NatureEncoder | ImpalaEncoder | SmallEncoder:
    """The encoder `name` for [N, C, H, W] images, initialised; `.features` is its output width."""
    encoder: NatureEncoder | ImpalaEncoder | SmallEncoder
    if name == "nature":
        encoder = NatureEncoder(image_shape)
    elif name == "impala":
        encoder = ImpalaEncoder(image_shape)
    elif name == "small":
        encoder = SmallEncoder(image_shape, small_features(hidden_sizes))
    else:
        raise ValueError(f"unknown image encoder '{name}' (one of {', '.join(CNN_ENCODERS)})")
    orthogonal_init(encoder)
    return encoder
