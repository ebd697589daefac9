"""How samplers report workers that fail, and the failure that stops a run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerFailure:
    """Returned in place of a batch by a worker that died, crashed or raised: never trained on.
    `stops_run`: an error a replacement would only repeat (an environment that fails for good),
    raised by the pool instead of replacing the worker, as the local sampler raises it."""

    reason: str
    stops_run: Exception | None = None


class WorkerPoolError(RuntimeError):
    """Too many workers failed, or too few are left: the run cannot go on as configured."""


class NonFiniteObservationError(RuntimeError):
    """The environments returned NaN or infinite observations or rewards: not trained on."""
