"""The one interface every sampler offers the trainer."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlpar.sampling.batch import Batch


class Sampler(ABC):
    """Turns policy weights into a batch of experience.

    `sample` receives the newest weights and their version; a blocking sampler acts with
    exactly these, a non-blocking one may return data from older versions (the batch says which).
    """

    num_envs: int

    @abstractmethod
    def sample(self, weights: dict, version: int) -> Batch: ...

    def metrics(self) -> dict:
        """Timings and health of the last `sample` call, merged into the iteration's metrics."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict, *, environments: bool = True) -> None:
        """`environments=False` restores counters only and keeps the environments as built."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
