"""Where a run's start-up goes: seconds from the start to each milestone, so the wait before the
first iteration can be read piece by piece (main.log, and `time_startup_s` in the first metrics
row). A process's first run starts when its Python interpreter started (its own start-up and the
imports count); a sweep's later jobs in the same process start with their job.

The kernel's start time of the process is not the interpreter's: `bash -c 'pip install ... &&
python main.py'` runs python in the shell's own process, created before the install. So the
interpreter's start is taken as this module's import time less the CPU time the process has
used by then (a shell waiting on `sleep` or `pip` uses none: its children's time is theirs), and
never before the process's creation. Python's own start-up before this import thus counts at its
CPU time, a few hundredths of a second, which is less than its wall time on a loaded machine."""

from __future__ import annotations

import time

_MARKS: list[tuple[str, float]] = []
_ORIGIN: list[float] = []  # when the current job started (epoch seconds); empty before the first
_INTERPRETER_STARTED = time.time() - time.process_time()  # imported early by main.py and `rlpar` (rlpar/cli.py)


def start_job() -> bool:
    """Forget the previous job's marks and start the clock; True for the process's first job."""
    first = not _ORIGIN
    _MARKS.clear()
    _ORIGIN[:] = [interpreter_started() if first else time.time()]
    return first


def interpreter_started() -> float:
    """When this process's Python interpreter started (epoch seconds): see the module's docstring."""
    import psutil

    return max(_INTERPRETER_STARTED, psutil.Process().create_time())


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
