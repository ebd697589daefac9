"""Errors a learner raises to stop a run with a clear message (importable without torch)."""


class NonFiniteLossError(RuntimeError):
    """Raised when updates keep producing NaN or infinite losses."""
