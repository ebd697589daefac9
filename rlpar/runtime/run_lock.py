"""One writer per run directory, for as long as the run lives.

Two runs writing one directory interleave metrics, overwrite each other's config and delete each
other's checkpoints. The lock is a POSIX record lock (`lockf`) on `<run_dir>/.rlpar.lock`: the
kernel drops it when the process ends, however it ends, so a SIGKILLed run never blocks its own
resume, and forked workers do not inherit it. The file names the holder, for the refusal line.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

LOCK_NAME = ".rlpar.lock"
_held: dict[Path, int] = {}  # run directories this process holds, with the lock's descriptor


class RunDirInUseError(Exception):
    """Another process (or another run in this one) writes this run directory."""


def holds(run_dir: str | Path) -> bool:
    return Path(run_dir).resolve() in _held


def acquire(run_dir: str | Path) -> None:
    """Lock `run_dir` (created if needed) for this process, or raise RunDirInUseError at once."""
    directory = Path(run_dir).resolve()
    if directory in _held:
        raise RunDirInUseError(f"run directory {run_dir} is already in use by another run of this process")
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _describe_holder(fd)
        os.close(fd)
        raise RunDirInUseError(
            f"run directory {run_dir} is in use by {holder}; wait for that run to end, or choose another run_dir"
        ) from None
    os.ftruncate(fd, 0)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": " ".join(sys.argv)}
    os.pwrite(fd, json.dumps(holder).encode() + b"\n", 0)
    _held[directory] = fd


def release(run_dir: str | Path) -> None:
    fd = _held.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.ftruncate(fd, 0)
        os.close(fd)  # closing drops the lock


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {holder['pid']} on {holder['host']} (since {holder['since']}: {holder['command']})"
    except (ValueError, KeyError, TypeError):
        return "another process (it is starting up)"
