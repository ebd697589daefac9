"""Which stored items a learner replays: uniformly, or in proportion to their TD errors.

Both samplers answer the same calls (`on_insert`, `sample`, `update_priorities`, `forget`), so
an algorithm replays without asking which one it holds; the uniform one ignores priorities.
`forget` drops items a storage lost early (rlpar.replay.frames) from sampling.
`sample` returns (indices, importance weights); weights are all 1 for the uniform sampler.
"""

from __future__ import annotations

import numpy as np

from rlpar.replay.sum_tree import SumTree


class UniformSampler:
    def __init__(self, *, seed: int):
        self._rng = np.random.default_rng(seed)
        self._forgotten = np.zeros(0, bool)  # by slot: items that may not be replayed (rlpar.replay.frames)
        self._forgotten_count = 0

    def on_insert(self, indices, priorities=None) -> None:
        """New items in these slots may be replayed again, forgotten or not before."""
        if self._forgotten_count:
            indices = np.asarray(indices, np.int64)
            indices = np.unique(indices[indices < len(self._forgotten)])
            self._forgotten_count -= int(self._forgotten[indices].sum())
            self._forgotten[indices] = False

    def forget(self, indices) -> None:
        """Never replay the items in these slots (until new ones are inserted there)."""
        indices = np.unique(np.asarray(indices, np.int64))
        if not len(indices):
            return
        if indices[-1] >= len(self._forgotten):
            self._forgotten = np.concatenate([self._forgotten, np.zeros(indices[-1] + 1 - len(self._forgotten), bool)])
        self._forgotten_count += int((~self._forgotten[indices]).sum())
        self._forgotten[indices] = True

    def sample(self, *, batch_size: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniform over the stored items not forgotten (forgotten draws are drawn again)."""
        if size <= self._forgotten_count:
            raise ValueError("cannot sample from an empty replay buffer")
        indices = self._rng.integers(0, size, batch_size, dtype=np.int64)
        if self._forgotten_count and len(self._forgotten) < size:
            self._forgotten = np.concatenate([self._forgotten, np.zeros(size - len(self._forgotten), bool)])
        while self._forgotten_count:
            again = np.flatnonzero(self._forgotten[indices])
            if not len(again):
                break
            indices[again] = self._rng.integers(0, size, len(again), dtype=np.int64)
        return indices, np.ones(batch_size, np.float32)

    def update_priorities(self, indices, td_errors) -> None:
        pass

    def state_dict(self) -> dict:
        import torch  # the learner checkpoints; actors and shards need no torch

        return {"rng": self._rng.bit_generator.state, "forgotten": torch.from_numpy(np.flatnonzero(self._forgotten))}

    def load_state_dict(self, state: dict) -> None:
        self._rng.bit_generator.state = state["rng"]
        self._forgotten, self._forgotten_count = np.zeros(0, bool), 0
        if "forgotten" in state:  # absent from checkpoints written before rlpar.replay.frames
            self.forget(state["forgotten"].numpy())


class PrioritizedSampler:
    """Proportional prioritised replay (Schaul et al., 2016).

    Item i is drawn with probability P(i) = p_i / sum_j p_j, p_i = (|delta_i| + epsilon)^alpha;
    epsilon keeps an item with a zero TD error reachable. The bias of sampling some items more
    is undone by importance weights (N P(i))^-beta, divided by the batch's largest so they only
    ever shrink updates; beta rises linearly from beta_start to beta_end over `beta_steps`
    calls to `sample`, reaching full correction as learning settles. New items get the largest
    priority seen so far, so each is replayed at least about once before its TD error is known.
    """

    def __init__(
        self,
        *,
        capacity: int,
        beta_steps: int,
        seed: int,
        alpha: float = 0.6,
        beta_start: float = 0.4,
        beta_end: float = 1.0,
        epsilon: float = 1e-6,
    ):
        if alpha < 0 or epsilon <= 0 or beta_steps < 1:
            raise ValueError(
                f"prioritised replay needs alpha >= 0, epsilon > 0 and beta_steps >= 1, "
                f"got alpha={alpha}, epsilon={epsilon}, beta_steps={beta_steps}"
            )
        self.alpha, self.epsilon = float(alpha), float(epsilon)
        self.beta_start, self.beta_end, self.beta_steps = float(beta_start), float(beta_end), int(beta_steps)
        self.tree = SumTree(capacity=capacity)
        self._rng = np.random.default_rng(seed)
        self.sample_calls = 0

    @property
    def beta(self) -> float:
        progress = min(1.0, self.sample_calls / self.beta_steps)
        return self.beta_start + (self.beta_end - self.beta_start) * progress

    def _stored(self, magnitudes) -> np.ndarray:
        return (np.abs(np.asarray(magnitudes, dtype=np.float64)) + self.epsilon) ** self.alpha

    def on_insert(self, indices, priorities=None) -> None:
        """New items (possibly overwriting old slots): the largest priority so far, or, for
        actors that computed their own (Ape-X), these priorities, treated like TD errors."""
        if priorities is None:
            self.tree.update(indices, self.tree.max_priority)
        else:
            self.tree.update(indices, self._stored(priorities))

    def forget(self, indices) -> None:
        """Never replay the items in these slots (priority 0) until new ones are inserted there."""
        self.tree.update(indices, 0.0)

    def sample(self, *, batch_size: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Stratified: the priority mass is cut into batch_size equal segments and one item drawn
        from each, which spreads a batch over the distribution with less variance than
        independent draws. `size` is the number of items stored (N in the weights)."""
        if size < 1:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self.tree.total
        segment = total / batch_size
        queries = (np.arange(batch_size) + self._rng.random(batch_size)) * segment
        indices = self.tree.find(queries)
        probabilities = self.tree.get(indices) / total
        # (N P)^-beta / max(N P)^-beta = (P / min P)^-beta: N cancels, kept for the definition.
        weights = (size * probabilities) ** -self.beta
        weights /= weights.max()
        self.sample_calls += 1
        return indices, weights.astype(np.float32)

    def update_priorities(self, indices, td_errors) -> None:
        self.tree.update(indices, self._stored(td_errors))

    def state_dict(self) -> dict:
        return {"tree": self.tree.state_dict(), "sample_calls": self.sample_calls, "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.tree.load_state_dict(state["tree"])
        self.sample_calls = int(state["sample_calls"])
        self._rng.bit_generator.state = state["rng"]
