"""Atomic, rotating, verified checkpoints that load without running code from the file.

A checkpoint is a dict of tensors and plain Python values written with `torch.save` and read
back with `weights_only=True`, which refuses anything else. Every top-level section carries a
SHA-256 of its contents, checked on load: flipped or missing bytes are caught even where the
file still parses. The few pickles that exact resume needs (environment state) are signed with
this user's key (signed_pickle.py) and only unpickled after their signature verifies.

It is serialised in memory, written to a temporary file, flushed and fsynced, then renamed, so
a kill or a full disk mid-write never leaves a file that looks valid, and never a stray
temporary file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from rlpar.runtime.errors import CheckpointError, CheckpointWriteError
from rlpar.signed_pickle import SIGNED_PICKLE, UntrustedPickleError, verify

NAME = re.compile(r"^checkpoint_(\d{8})\.pt$")
FORMAT = 2
SKIPPED_SUFFIX = ".skipped"  # a damaged checkpoint set aside by a resume (kept to look at)


class Checkpointer:
    @classmethod
    def resume_problems(cls, config) -> list[str]:
        """Whether `resume` (a run directory, already found to be one) can be continued: a valid
        checkpoint, made with the config that would run now, holding only state this user signed.
        Asked only for a resumed run: this module imports torch. `config`: a
        rlpar.config.validate.ConfigView."""
        from rlpar.config.changes import config_mismatches

        resume = config.get("resume")
        damaged: list = []
        found = latest_valid_checkpoint(str(resume), damaged)
        if found is None and not damaged:
            return [f"resume: '{resume}' has no checkpoint to resume from (checkpoints/ is empty or missing)"]
        if found is None:
            return [
                f"resume: '{resume}' cannot be resumed: its {len(damaged)} checkpoint(s) are all damaged/unreadable "
                f"(newest: {damaged[0][1]})"
            ]
        if isinstance(found[1].get("config"), dict) and (
            changed := config_mismatches(config.resolved(), found[1]["config"])
        ):
            return [
                f"resume: {Path(str(resume)) / 'config.yaml'} no longer matches {found[0].name}, whose weights and "
                f"environments were made with another config: {'; '.join(changed)}. Put those values back, or train "
                f"them as a new run (a new run_dir)"
            ]
        if config.get("resume_envs") is not False and (untrusted := untrusted_pickles(found[1])):
            return [
                f"resume: {found[0].name} holds environment state this user did not write ({untrusted[0]}); nothing "
                f"of it was unpickled. To resume without it (same weights, optimiser and counters, fresh "
                f"environments): python main.py resume={resume} resume_envs=false"
            ]
        return []

    def __init__(self, *, run_dir: str, every: int = 20, keep: int = 3):
        self.directory = Path(run_dir) / "checkpoints"
        self.every = every
        self.keep = keep

    def due(self, iteration: int) -> bool:
        return self.every > 0 and iteration % self.every == 0

    def save(self, state: dict, iteration: int) -> Path:
        path = self.directory / f"checkpoint_{iteration:08d}.pt"
        tmp = path.with_name(path.name + ".tmp")
        state = with_checksums(state)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Beyond `keep` first (a resume with a lower checkpoint.keep): their space may be what a
            # full disk lacks for the new one. Never the newest `keep`: the new one may yet fail.
            self._prune()
            # Straight to the file, not through an in-memory copy: a checkpoint holding a large
            # replay buffer must not need twice its size in memory.
            with open(tmp, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except (OSError, RuntimeError) as err:
            # torch.save's zip writer may turn a failed write into a RuntimeError raised while
            # closing; the OSError behind it is then the RuntimeError's context
            os_error = err if isinstance(err, OSError) else err.__context__
            if not isinstance(os_error, OSError):
                raise
            tmp.unlink(missing_ok=True)
            kept = ", ".join(p.name for p in list_checkpoints(self.directory)) or "none"
            raise CheckpointWriteError(
                f"cannot write checkpoint {path} ({_os_reason(os_error)}); earlier checkpoints are kept: {kept}"
            ) from err
        self._prune()
        return path

    def _prune(self) -> None:
        for old in list_checkpoints(self.directory)[: -self.keep] if self.keep > 0 else []:
            old.unlink(missing_ok=True)


def _os_reason(err: OSError) -> str:
    return "no space left on device" if err.errno == errno.ENOSPC else (err.strerror or str(err))


def list_checkpoints(directory: Path) -> list[Path]:
    """Finished checkpoints, oldest first (temporary and set-aside files are ignored)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if NAME.match(p.name))


# -- integrity --------------------------------------------------------------------------------
def _feed(digest, value) -> None:
    """Hash `value` by type and content, the same way for the same data whatever its container."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        if flat.numel():
            digest.update(flat.view(torch.uint8).numpy())  # hashed in place, not copied to bytes
    elif isinstance(value, Mapping):
        digest.update(f"M{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"V{type(value).__name__}:{value!r};".encode())


def checksum(value) -> str:
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def with_checksums(state: dict) -> dict:
    return {**state, "format": FORMAT, "checksums": {key: checksum(value) for key, value in state.items()}}


def _verify_checksums(state) -> None:
    if not isinstance(state, dict) or not isinstance(state.get("checksums"), dict):
        raise CheckpointError("it has no checksums (not an rlpar checkpoint, or one older than format 2)")
    expected = state["checksums"]
    sections = [key for key in state if key not in ("format", "checksums")]
    damaged = [key for key in sections if expected.get(key) != checksum(state[key])]
    missing = [key for key in expected if key not in state]
    if damaged or missing:
        raise CheckpointError(f"checksum mismatch in {', '.join(damaged + missing)}: the file is damaged")


def _oversized_tensor(value, limit: int, where: str = "") -> str | None:
    """Where `value` holds a tensor of more bytes than `limit` (its file's size), and its shape: a
    view stretched over a small storage (`expand`), which hashing would make contiguous, allocating
    every byte."""
    if isinstance(value, torch.Tensor):
        size = value.numel() * value.element_size()
        return f"{where or 'state'} {tuple(value.shape)} ({size:,} bytes)" if size > limit else None
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    return next(
        filter(None, (_oversized_tensor(item, limit, f"{where}.{key}".lstrip(".")) for key, item in items)), None
    )


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint's state, after its sizes and checksums verify (CheckpointError otherwise)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(f"checkpoint '{path}' cannot be read ({_short_reason(err)})") from err
    file_size = os.path.getsize(path)
    if oversized := _oversized_tensor(state, file_size):
        raise CheckpointError(
            f"checkpoint '{path}' cannot be used (a tensor larger than the whole {file_size:,}-byte "
            f"file, {oversized}: the file is damaged)"
        )
    try:
        _verify_checksums(state)
    except CheckpointError as err:
        raise CheckpointError(f"checkpoint '{path}' cannot be used ({err})") from None
    return state


def _short_reason(err: Exception) -> str:
    """One line: torch's weights_only refusals run to a dozen lines of advice."""
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    line = next((row.strip() for row in text.splitlines() if row.strip()), "")
    line = line.split(". ", 1)[0]
    if not line:
        return f"{type(err).__name__}: empty or truncated file" if isinstance(err, EOFError) else type(err).__name__
    return f"{type(err).__name__}: {line[:160]}"


def latest_valid_checkpoint(run_dir: str | Path, skipped: list | None = None) -> tuple[Path, dict] | None:
    """The newest checkpoint of a run that loads and verifies, skipping damaged ones (their
    (path, CheckpointError) pairs, newest first, are appended to `skipped` when given)."""
    for path in reversed(list_checkpoints(Path(run_dir) / "checkpoints")):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as err:
            if skipped is not None:
                skipped.append((path, err))
    return None


def set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint out of the rotation, keeping it to look at."""
    target = path.with_name(path.name + SKIPPED_SUFFIX)
    os.replace(path, target)
    return target


# -- signed pickles ---------------------------------------------------------------------------
def untrusted_pickles(state, where: str = "") -> list[str]:
    """Where `state` holds a signed pickle that this user's key did not sign, and why."""
    if isinstance(state, Mapping):
        if SIGNED_PICKLE in state:
            try:
                verify(state[SIGNED_PICKLE].numpy().tobytes(), state.get("hmac_sha256"))
            except UntrustedPickleError as err:
                return [f"{where or 'state'}: {err}"]
            return []
        return [p for key, value in state.items() for p in untrusted_pickles(value, f"{where}.{key}".lstrip("."))]
    if isinstance(state, (list, tuple)):
        return [p for i, value in enumerate(state) for p in untrusted_pickles(value, f"{where}[{i}]")]
    return []
