"""Failures that stop a run with one line (importable without torch, for main.py)."""

from __future__ import annotations

from rlpar.cluster.errors import RayInstanceLostError
from rlpar.errors import EnvironmentFailedError, LearnerGroupError, RunDirError
from rlpar.learning.errors import NonFiniteLossError
from rlpar.sampling.errors import NonFiniteObservationError, WorkerPoolError


class CheckpointError(Exception):
    pass


class CheckpointWriteError(CheckpointError):
    """The checkpoint could not be written (e.g. the disk is full); earlier ones are intact."""


# A run stops on these with a final checkpoint where one can still be written, and one line.
TRAINING_STOPS = (
    NonFiniteLossError,
    NonFiniteObservationError,
    WorkerPoolError,
    CheckpointWriteError,
    RunDirError,
    EnvironmentFailedError,
    RayInstanceLostError,
    LearnerGroupError,
)
