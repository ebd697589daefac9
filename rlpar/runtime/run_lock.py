"""A run directory belongs to one run, for as long as that run lives.

Two runs writing one directory interleave metrics, overwrite each other's config and prune each
other's checkpoints. So:
- the lock is an `flock` on the run directory itself, not on a file in it: deleting files cannot
  release it, the kernel drops it when the process ends however it ends (a SIGKILLed run never
  blocks its own resume), and forked workers close their copy at once;
- `.rlpar.lock` only says who holds the lock, for the refusal line, and goes when the run ends;
- a new run takes only a directory that is new or empty: a finished run's files, or a user's,
  are never overwritten (`resume=` continues a run);
- `check_owner` (called before each iteration's writes) stops a run whose directory was moved
  or replaced under it, instead of writing into a directory another run may now own.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from rlpar.errors import RunDirError

HOLDER_FILE = ".rlpar.lock"
# What rlpar writes into a run directory: a directory holding only these (and config.yaml) holds a run.
RUN_FILES = frozenset(
    {
        "config.yaml",
        "config.signed.json",
        "metrics.jsonl",
        "main.log",
        "events.jsonl",
        "checkpoints",
        "tensorboard",
        "wandb",
        "videos",
        "evaluations.jsonl",
        "trials",
        "tune",
        "search.csv",
        "best.yaml",
        "search_command.json",
        HOLDER_FILE,
    }
)
LISTED = 4  # entries named in a refusal

_held: dict[Path, int] = {}  # run directories this process holds, with the locked directory's descriptor


class RunDirInUseError(Exception):
    """The run directory is another run's (live, finished, or a user's folder): said in one line."""


class RunDirLostError(RunDirError):
    """The run directory was moved, replaced or removed while the run wrote to it: nothing more
    is written there, not even a final checkpoint."""


def holds(run_dir: str | Path) -> bool:
    return Path(run_dir).resolve() in _held


def acquire(run_dir: str | Path, *, new_run: bool) -> None:
    """Lock `run_dir` (created if needed) for this process, or raise RunDirInUseError at once:
    another process holds it, or `new_run` and it already holds files."""
    directory = Path(run_dir).resolve()
    if directory in _held:
        raise RunDirInUseError(f"run directory {run_dir} is already in use by another run of this process")
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    if problem := _lock_problem(fd, directory, str(run_dir), new_run=new_run):
        os.close(fd)
        raise RunDirInUseError(problem)
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv),
        "note": "the lock is held on this directory itself while that process lives; this file only names it",
    }
    try:
        (directory / HOLDER_FILE).write_text(json.dumps(holder) + "\n")
    except OSError:
        pass  # only the refusal line of a second run would miss the holder's name
    _held[directory] = fd


def refusal(run_dir: str | Path, *, new_run: bool) -> str | None:
    """Why `acquire` would refuse `run_dir` now, found in a moment and without keeping the lock:
    so a second run is refused before validating its config, which may take seconds."""
    directory = Path(run_dir)
    try:
        fd = os.open(directory.resolve(), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # not there yet, or not a directory: validation names what is wrong
        return None
    try:
        return _lock_problem(fd, directory.resolve(), str(run_dir), new_run=new_run)
    finally:
        os.close(fd)  # and with it the lock, if it was taken


def _lock_problem(fd: int, directory: Path, shown: str, *, new_run: bool) -> str | None:
    """Take the lock on the directory open as `fd`; why not, when it cannot be taken or used."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return (
            f"run directory {shown} is in use by {_describe_holder(directory)}; wait for that run to end, or "
            f"choose another run_dir"
        )
    return _occupied(directory, shown) if new_run else None


def release(run_dir: str | Path) -> None:
    directory = Path(run_dir).resolve()
    fd = _held.pop(directory, None)
    if fd is None:
        return
    if _same_directory(directory, fd):
        try:
            (directory / HOLDER_FILE).unlink(missing_ok=True)
        except OSError:
            pass
    os.close(fd)  # closing drops the lock


def release_all() -> None:
    for directory in list(_held):
        release(directory)


def check_owner(run_dir: str | Path) -> None:
    """Raise RunDirLostError unless `run_dir` is still the directory this process locked."""
    directory = Path(run_dir).resolve()
    fd = _held.get(directory)
    if fd is not None and not _same_directory(directory, fd):
        raise RunDirLostError(
            f"run directory {run_dir} was moved, replaced or removed during the run; stopped "
            f"rather than write where another run may now be"
        )


def _same_directory(directory: Path, fd: int) -> bool:
    try:
        here, locked = os.stat(directory), os.fstat(fd)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (locked.st_dev, locked.st_ino)


def _occupied(directory: Path, shown: str) -> str | None:
    """Why a new run may not write into `directory`, or None when it is empty."""
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir() if p.name != HOLDER_FILE)
    if not entries:
        return None
    names = ", ".join(entries[:LISTED]) + (f" and {len(entries) - LISTED} more" if len(entries) > LISTED else "")
    if "config.yaml" in entries and {e.rstrip("/") for e in entries} <= RUN_FILES:
        return (
            f"run directory {shown} already holds a run ({names}); continue it with resume={shown}, or give a "
            f"new run_dir to start afresh"
        )
    return (
        f"run directory {shown} holds files rlpar did not write ({names}); a run writes only into a new or "
        f"empty directory: give another run_dir"
    )


def _describe_holder(directory: Path) -> str:
    try:
        holder = json.loads((directory / HOLDER_FILE).read_text())
        return f"process {holder['pid']} on {holder['host']} (since {holder['since']}: {holder['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _close_in_child() -> None:
    """A forked worker must not keep the lock alive after the run that holds it has died."""
    for fd in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)
