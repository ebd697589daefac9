"""Reward clipping for the losses (`algo.reward_clip`), in numpy only: Ape-X's actors and A3C's
gradient workers apply it too, and Ape-X's actors never import torch."""

from __future__ import annotations

import numpy as np


def clip_rewards(rewards: np.ndarray, clip: float | None) -> np.ndarray:
    """Rewards clipped to [-clip, clip] (DQN's, IMPALA's and PPO's Atari agents train on rewards
    clipped to [-1, 1]); None leaves them as they are. Logged returns always stay raw."""
    return rewards if clip is None else np.clip(rewards, -clip, clip).astype(np.float32)
