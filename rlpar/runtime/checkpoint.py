"""Atomic, rotating checkpoints that load without unpickling arbitrary objects.

A checkpoint is a dict of tensors and plain Python values written with `torch.save` and read
back with `weights_only=True`, which refuses anything else. It is written to a temporary file,
flushed and fsynced, then renamed, so a kill mid-write never leaves a file that looks valid.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

NAME = re.compile(r"^checkpoint_(\d{8})\.pt$")


class CheckpointError(Exception):
    pass


class Checkpointer:
    def __init__(self, *, run_dir: str, every: int = 20, keep: int = 3):
        self.directory = Path(run_dir) / "checkpoints"
        self.every = every
        self.keep = keep

    def due(self, iteration: int) -> bool:
        return self.every > 0 and iteration % self.every == 0

    def save(self, state: dict, iteration: int) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"checkpoint_{iteration:08d}.pt"
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        self._prune()
        return path

    def _prune(self) -> None:
        for old in list_checkpoints(self.directory)[: -self.keep] if self.keep > 0 else []:
            old.unlink(missing_ok=True)


def list_checkpoints(directory: Path) -> list[Path]:
    """Finished checkpoints, oldest first (temporary files are ignored)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if NAME.match(p.name))


def load_checkpoint(path: str | Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(f"checkpoint '{path}' cannot be read ({_short_reason(err)})") from err


def _short_reason(err: Exception) -> str:
    """One line: torch's weights_only refusals run to a dozen lines of advice."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")
    line = line.split(". ", 1)[0]
    if not line:
        return f"{type(err).__name__}: empty or truncated file" if isinstance(err, EOFError) else type(err).__name__
    return f"{type(err).__name__}: {line[:160]}"


def latest_valid_checkpoint(run_dir: str | Path, skipped: list | None = None) -> tuple[Path, dict] | None:
    """The newest checkpoint of a run that loads, skipping damaged ones (their CheckpointErrors,
    newest first, are appended to `skipped` when given)."""
    for path in reversed(list_checkpoints(Path(run_dir) / "checkpoints")):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as err:
            if skipped is not None:
                skipped.append(err)
    return None
