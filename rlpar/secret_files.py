"""Secret files that rlpar keeps for its user: the checkpoint signing key and Ray's auth token.

A secret protects nothing when it is empty, short, or readable by others, and a file half
written by a full disk is all three at once: an empty key used to sign checkpoints silently,
so anyone could forge one. So a secret is read only after it is checked, and written only
whole: into a temporary file that no one else can read, fsynced, then linked into place, so
the name never shows a partial file, and two processes creating it at once keep the first.
"""

from __future__ import annotations

import fcntl
import os
import stat
import string
from contextlib import contextmanager
from pathlib import Path

HEX_DIGITS = frozenset(string.hexdigits)


class SecretFileError(Exception):
    """A secret file that cannot be used, said in one line with what to do about it."""


def read_secret(
    path: Path, *, what: str, min_chars: int = 1, hex_only: bool = False, private: bool = True
) -> str | None:
    """The stripped text of the secret at `path`; None where there is none yet: no file, or an
    empty one (what an interrupted write leaves). SecretFileError when it exists but cannot be
    used: not a regular file, unreadable, shorter than `min_chars`, not hexadecimal (`hex_only`),
    or, when `private`, readable or writable by other users."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SecretFileError(f"{what} {path} cannot be read ({err.strerror or err})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise SecretFileError(f"{what} {path} is {kind}; remove it and rlpar makes a new one")
    if private and info.st_mode & 0o077:
        raise SecretFileError(
            f"{what} {path} is open to other users (mode {stat.S_IMODE(info.st_mode):04o}): whoever read it can "
            f"forge what it signs. If nobody else can have read it, run `chmod 600 {path}`; otherwise delete it "
            f"and rlpar makes a new one"
        )
    try:
        text = path.read_bytes().decode("ascii").strip()
    except UnicodeDecodeError:
        raise SecretFileError(
            f"{what} {path} holds binary data, not text; delete it and rlpar makes a new one"
        ) from None
    except OSError as err:
        raise SecretFileError(f"{what} {path} cannot be read ({err.strerror or err})") from None
    if not text:
        return None
    if hex_only and not set(text) <= HEX_DIGITS:
        raise SecretFileError(f"{what} {path} does not hold hexadecimal digits; delete it and rlpar makes a new one")
    if len(text) < min_chars:
        raise SecretFileError(
            f"{what} {path} holds {len(text)} characters, fewer than the {min_chars} a secret "
            f"needs; delete it and rlpar makes a new one"
        )
    return text


def create_secret(path: Path, text: str, *, replace_empty: bool = True) -> bool:
    """Write `text` as the secret at `path` (mode 0600), whole or not at all. Returns False, and
    writes nothing, when a non-empty file is there already (another process was first). An empty
    file is replaced when `replace_empty`: nothing can have been signed with it, as an empty
    secret is never used."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _directory_locked(path.parent):
        try:
            if path.stat().st_size > 0 or not replace_empty:
                return False
            existed = True
        except FileNotFoundError:
            existed = False
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (text + "\n").encode())
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            if existed:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)  # fails rather than overwrite a file another program made meanwhile
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_directory(path.parent)
    return True


@contextmanager
def _directory_locked(directory: Path):
    """One process at a time creates secrets in `directory` (an flock held on the folder itself)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
