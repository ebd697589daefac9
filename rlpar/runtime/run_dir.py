"""What every way of starting a run writes first: the run directory's lock and its config.yaml
(the resolved config, which `resume=` and `rlpar evaluate` read back)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlpar.runtime import run_lock
from rlpar.runtime.errors import RunDirError

CONFIG_FILE = "config.yaml"


def write_config(run_dir: Path, config: dict) -> None:
    try:
        with open(Path(run_dir) / CONFIG_FILE, "w") as handle:
            yaml.safe_dump(config, handle, sort_keys=False)
    except OSError as err:
        raise RunDirError(f"cannot write to run directory {run_dir} ({err.strerror or err})") from err


def claim(run_dir: Path, *, config: dict) -> bool:
    """For a trainer built outside `run()` (the Python API, a search trial): lock `run_dir` and
    write its config.yaml, as `run()` does before it builds. A directory with files is taken
    (a trainer built to restore a checkpoint), one in use by another process is refused
    (RunDirInUseError). Returns False, doing nothing, where this process holds the lock already
    (`run()` has done both)."""
    if run_lock.holds(run_dir):
        return False
    run_lock.acquire(run_dir, new_run=False)
    try:
        write_config(run_dir, config)
    except BaseException:
        run_lock.release(run_dir)
        raise
    return True
