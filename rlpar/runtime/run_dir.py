"""What every way of starting a run writes first: the run directory's lock and its config.yaml
(the resolved config, which `resume=` and `rlpar evaluate` read back), with a signed copy.

A run directory is data: whoever can write to it, or handed it over, can put any import path in
its config.yaml (`_target_`, `env.entry_point`, `env.import_dir`). So config.yaml is also stored,
byte for byte, in config.signed.json with its HMAC-SHA256 under this user's key
(rlpar.signed_pickle), and `resume=` and `rlpar evaluate` import only the code that this signed
copy names: values that are not code (sizes, seeds, env.kwargs) may still be edited.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rlpar.runtime import run_lock
from rlpar.runtime.errors import RunDirError
from rlpar.secret_files import SecretFileError
from rlpar.signed_pickle import UntrustedPickleError, sign, verify

CONFIG_FILE = "config.yaml"
SIGNED_CONFIG_FILE = "config.signed.json"  # {"config": config.yaml's text, "hmac_sha256": its signature}
CODE_KEYS = ("env.entry_point", "env.import_dir", "env.kind", "env.imports", "env.wrappers")  # besides every `_target_`


def write_config(run_dir: Path, config: dict) -> None:
    text = yaml.safe_dump(config, sort_keys=False)
    signed = Path(run_dir) / SIGNED_CONFIG_FILE
    try:
        signature = sign(text.encode())
    except SecretFileError:  # an unusable key (validation names it before a run): the run is not signed
        signature = None
    try:
        signed.unlink(missing_ok=True)  # never a signed copy of an older config.yaml beside a newer one
        (Path(run_dir) / CONFIG_FILE).write_text(text)
        if signature is not None:
            signed.write_text(json.dumps({"config": text, "hmac_sha256": signature}))
    except OSError as err:
        raise RunDirError(f"cannot write to run directory {run_dir} ({err.strerror or err})") from err


def code_references(config: dict) -> dict[str, object]:
    """What in a run's config names code to import: every `_target_`, the environment's entry
    point, import directory and kind, and its id where that names a module (a PettingZoo module,
    or Gymnasium's `module:Env-v0`)."""
    named: dict[str, object] = {}

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                where = f"{path}.{key}".lstrip(".")
                if key == "_target_":
                    named[where] = value
                walk(value, where)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(config, "")
    env = config.get("env")
    if not isinstance(env, dict):
        env = {}
    for key in CODE_KEYS:
        named[key] = env.get(key.split(".", 1)[1])
    env_id = env.get("id")
    if (
        env.get("kind") == "pettingzoo"
        or (isinstance(env_id, str) and ":" in env_id)
        or not isinstance(env_id, (str, type(None)))
    ):
        named["env.id"] = env_id
    return named


def unsigned_code(run_dir: Path, config: dict) -> str | None:
    """Why the code that `config` (the run directory's config.yaml, read as data) names may not be
    imported, in a few words; None when it is all what the run's signed copy names, under this
    user's key."""
    path = Path(run_dir) / SIGNED_CONFIG_FILE
    try:
        signed = json.loads(path.read_text())
    except FileNotFoundError:
        return f"it has no {SIGNED_CONFIG_FILE} (a run from elsewhere, or from an older rlpar)"
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return f"its {SIGNED_CONFIG_FILE} cannot be read ({type(err).__name__})"
    text, signature = (signed.get("config"), signed.get("hmac_sha256")) if isinstance(signed, dict) else (None, None)
    if not isinstance(text, str):
        return f"its {SIGNED_CONFIG_FILE} holds no config"
    try:
        verify(text.encode(), signature)
    except UntrustedPickleError as err:
        return f"its {SIGNED_CONFIG_FILE} was not signed by this user ({err})"
    try:
        signed_config = yaml.safe_load(text)
    except yaml.YAMLError:
        signed_config = None
    expected = code_references(signed_config if isinstance(signed_config, dict) else {})
    named = code_references(config)
    changed = [key for key in sorted(named.keys() | expected.keys()) if named.get(key) != expected.get(key)]
    if changed:
        key = changed[0]
        return f"{key} is {named.get(key)!r} where the signed copy has {expected.get(key)!r}" + (
            f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        )
    return None


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
