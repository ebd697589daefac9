"""Rewards divided by the running standard deviation of the discounted return.

Continuous-control rewards come on any scale (Pendulum's reach -16 a step, HalfCheetah's +10); a
critic and an entropy bonus tuned for one scale fail on another. Strong PPOs (OpenAI Baselines'
and Stable-Baselines3's VecNormalize, CleanRL's continuous PPO) therefore scale each reward by the
running standard deviation of each environment's discounted return, and clip it. Here this
happens in the learner, not in the workers: each environment's return is followed across
rollouts by its global id (`Batch.env_ids`), so the statistics, and hence every update, are the
same whichever sampler delivered the columns and however the environments were split.
"""

from __future__ import annotations

import numpy as np
import torch

from rlpar.learning.estimators.env_rounds import rounds_of_distinct_envs
from rlpar.models.moments import merge_moments


class RewardNormalizer:
    def __init__(self, *, gamma: float, enabled: bool, clip: float = 10.0, epsilon: float = 1e-8):
        self.gamma, self.enabled, self.clip, self.epsilon = gamma, enabled, clip, epsilon
        self.discounted = np.zeros(0, np.float64)  # each environment's return so far, discounted, by global id
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, rewards: np.ndarray, *, env_ids, terminated, truncated, valid) -> np.ndarray:
        """Scaled rewards [T, N] of one batch (once per batch: it advances the statistics)."""
        if not self.enabled:
            return rewards
        returns = np.zeros(rewards.shape, np.float64)
        env_ids = np.asarray(env_ids)
        if len(env_ids) and env_ids.max() >= len(self.discounted):
            self.discounted = np.concatenate([self.discounted, np.zeros(env_ids.max() + 1 - len(self.discounted))])
        for columns in rounds_of_distinct_envs(env_ids):
            returns[:, columns] = self._follow(
                rewards[:, columns], env_ids[columns], terminated[:, columns], truncated[:, columns], valid[:, columns]
            )
        steps = returns[valid]
        if steps.size:
            self.mean, self.var, self.count = merge_moments(
                self.mean, self.var, self.count, float(steps.mean()), float(steps.var()), steps.size
            )
        scale = 1.0 / np.sqrt(self.var + self.epsilon)
        return np.clip(rewards * scale, -self.clip, self.clip).astype(np.float32)

    def _follow(self, rewards, env_ids, terminated, truncated, valid) -> np.ndarray:
        """Each step's discounted return since its episode began; carries on across batches."""
        running = self.discounted[env_ids]
        returns = np.empty(rewards.shape, np.float64)
        for t in range(len(rewards)):
            running = np.where(valid[t], running * self.gamma + rewards[t], running)
            returns[t] = running
            running = np.where((terminated[t] | truncated[t]) & valid[t], 0.0, running)
        self.discounted[env_ids] = running
        return returns

    def state_dict(self) -> dict:
        """Tensors and floats, for checkpoints read with weights_only."""
        # Python floats: merge_moments hands back numpy scalars, which weights_only refuses to load
        return {
            "discounted": torch.from_numpy(self.discounted.copy()),
            "mean": float(self.mean),
            "var": float(self.var),
            "count": float(self.count),
        }

    def load_state_dict(self, state: dict) -> None:
        self.discounted = state["discounted"].numpy().astype(np.float64)
        self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), float(state["count"])
