"""Where a run's start-up goes: seconds from the start to each milestone, so the wait before the
first iteration can be read piece by piece (main.log, and `time_startup_s` in the first metrics
row). A process's first run starts at the process's launch (the kernel's start time: interpreter
start-up and imports count); a sweep's later jobs in the same process start with their job."""

from __future__ import annotations

import time

_MARKS: list[tuple[str, float]] = []
_ORIGIN: list[float] = []  # when the current job started (epoch seconds); empty before the first


def start_job() -> bool:
    """Forget the previous job's marks and start the clock; True for the process's first job."""
    import psutil

    first = not _ORIGIN
    _MARKS.clear()
    _ORIGIN[:] = [psutil.Process().create_time() if first else time.time()]
    return first


def seconds_since_start() -> float:
    if not _ORIGIN:
        start_job()
    return time.time() - _ORIGIN[0]


def mark(milestone: str) -> None:
    """The moment `milestone` is reached (the first time only)."""
    if all(name != milestone for name, _ in _MARKS):
        _MARKS.append((milestone, seconds_since_start()))


def pieces() -> list[tuple[str, float]]:
    """(milestone, seconds since the previous one), in order."""
    previous, out = 0.0, []
    for name, at in _MARKS:
        out.append((name, at - previous))
        previous = at
    return out


def summary() -> str:
    """One line: the total, then each piece."""
    parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in pieces())
    return f"start-up {_MARKS[-1][1]:.2f} s: {parts}" if _MARKS else "start-up: nothing measured"
