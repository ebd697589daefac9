"""Pickles that only this user's own runs can make: signed with a per-user secret key.

Environment state has no common format, so exact resume has to pickle it, and unpickling runs
whatever code the bytes name. Like Jupyter's trusted notebooks, each pickle is signed with
HMAC-SHA256 under a secret key that only this user can read (created on first use, mode 0600,
written whole; an empty, short or shared key is never used: rlpar.secret_files), and the
signature is checked before a single byte is unpickled. A checkpoint handed over by
someone else, or altered on disk, therefore never executes anything: its environment state is
refused, and the run can be resumed without it (`resume_envs=false`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
from pathlib import Path

from rlpar.secret_files import SecretFileError, create_secret, read_secret

KEY_ENV = "RLPAR_KEY_FILE"
SIGNED_PICKLE = "signed_pickle"  # in a checkpoint: {signed_pickle: uint8 tensor, hmac_sha256: str}
KEY_BYTES = 32


class UntrustedPickleError(Exception):
    """A pickle whose signature does not verify under this user's key (never unpickled)."""


def key_path() -> Path:
    """`$RLPAR_KEY_FILE`, else `$XDG_CONFIG_HOME/rlpar/checkpoint.key` (~/.config by default)."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config_home) / "rlpar" / "checkpoint.key"


def user_key(*, create: bool) -> bytes | None:
    """The secret key; made (readable by this user only) when `create` and there is none yet, or
    only an empty file (what a full disk left). A key that cannot sign safely (short, not hex,
    open to other users, not a file) raises SecretFileError: never used, never replaced."""
    path = key_path()
    text = read_secret(path, what="checkpoint key", min_chars=2 * KEY_BYTES, hex_only=True)
    if text is None and create:
        create_secret(path, secrets.token_hex(KEY_BYTES))
        text = read_secret(path, what="checkpoint key", min_chars=2 * KEY_BYTES, hex_only=True)
    return bytes.fromhex(text) if text is not None else None


def key_problem() -> str | None:
    """Why the key file cannot be used, in one line (checked before a run starts), or None."""
    try:
        user_key(create=False)
    except SecretFileError as err:
        return str(err)
    return None


def _signature(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def dumps_signed(obj) -> tuple[bytes, str]:
    """The pickle of `obj` and its signature under this user's key."""
    data = pickle.dumps(obj)
    return data, sign(data)


def sign(data: bytes) -> str:
    """This user's signature of `data` (a pickle made elsewhere, e.g. rlpar.envs.state_pickle)."""
    key = user_key(create=True)
    assert key is not None  # create=True writes one, or raises
    return _signature(key, data)


def verify(data: bytes, signature) -> None:
    """Raise UntrustedPickleError unless `signature` is this user's signature of `data`."""
    try:
        key = user_key(create=False)
    except SecretFileError as err:  # an unusable key verifies nothing
        raise UntrustedPickleError(str(err)) from None
    if not isinstance(signature, str) or key is None or not hmac.compare_digest(_signature(key, data), signature):
        reason = (
            "it is not signed"
            if not isinstance(signature, str)
            else (
                f"there is no key at {key_path()}"
                if key is None
                else f"its signature does not match the key at {key_path()}"
            )
        )
        raise UntrustedPickleError(reason)


def loads_signed(data: bytes, signature) -> object:
    verify(data, signature)
    return pickle.loads(data)
