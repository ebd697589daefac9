"""Return statistics over the most recent finished episodes."""

from __future__ import annotations

from collections import deque


class EpisodeStats:
    def __init__(self, window: int = 20):
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0
        self.best_mean: float | None = None

    def add(self, returns, lengths) -> None:
        self.returns.extend(returns)
        self.lengths.extend(lengths)
        self.episodes += len(returns)
        mean = self.mean_return
        if mean is not None and (self.best_mean is None or mean > self.best_mean):
            self.best_mean = mean

    @property
    def mean_return(self) -> float | None:
        return sum(self.returns) / len(self.returns) if self.returns else None

    @property
    def mean_length(self) -> float | None:
        return sum(self.lengths) / len(self.lengths) if self.lengths else None

    def state_dict(self) -> dict:
        return {
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "episodes": self.episodes,
            "best_mean": self.best_mean,
        }

    def load_state_dict(self, state: dict) -> None:
        self.returns = deque(state["returns"], maxlen=self.window)
        self.lengths = deque(state["lengths"], maxlen=self.window)
        self.episodes = int(state["episodes"])
        self.best_mean = state["best_mean"]
