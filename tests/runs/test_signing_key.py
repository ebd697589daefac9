"""Keys that cannot sign are never used (issue 24): an empty key is replaced, a short, non-hex,
shared or non-file key is refused in one line, a key is written whole or not at all, and a
checkpoint forged under an empty key never runs its payload."""

import os
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlpar.runtime.checkpoint import Checkpointer, list_checkpoints, with_checksums
from rlpar.runtime.errors import CheckpointWriteError
from rlpar.signed_pickle import (KEY_ENV, SIGNED_PICKLE, UntrustedPickleError, _signature, dumps_signed,
                                         key_problem, loads_signed, user_key)
from tests.defaults import STEPS_PER_ITERATION

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def key_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "keys" / "checkpoint.key"
    monkeypatch.setenv(KEY_ENV, str(path))
    return path


def test_a_new_key_is_whole_random_and_private(key_file):
    data, signature = dumps_signed({"a": 1})
    assert loads_signed(data, signature) == {"a": 1}
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(bytes.fromhex(key_file.read_text())) == 32
    assert [p.name for p in key_file.parent.iterdir()] == ["checkpoint.key"]  # no temporary file left


def test_an_empty_key_is_replaced_and_verifies_nothing(key_file):
    key_file.parent.mkdir()
    key_file.write_text("")
    key_file.chmod(0o600)
    data = pickle.dumps("payload")
    with pytest.raises(UntrustedPickleError, match="there is no key"):  # signed under b"": never trusted
        loads_signed(data, _signature(b"", data))
    assert key_problem() is None
    dumps_signed("x")  # the next checkpoint makes a real key in its place
    assert len(bytes.fromhex(key_file.read_text())) == 32


@pytest.mark.parametrize("content, mode, expected", [
    ("abc", 0o600, "holds 3 characters, fewer than the 64"),
    ("not hex at all, not hex at all, not hex at all, not hex at all!!", 0o600, "does not hold hexadecimal digits"),
    ("ab" * 32, 0o644, "is open to other users (mode 0644)"),
    (None, None, "is a directory"),
])
def test_a_key_that_cannot_sign_is_refused_and_never_replaced(key_file, content, mode, expected):
    key_file.parent.mkdir()
    if content is None:
        key_file.mkdir()
    else:
        key_file.write_text(content)
        key_file.chmod(mode)
    problem = key_problem()
    assert problem is not None and expected in problem and str(key_file) in problem, problem
    with pytest.raises(UntrustedPickleError, match="checkpoint key"):
        loads_signed(b"x", "00")
    if content is not None:
        assert key_file.read_text() == content  # refused, not replaced: something may have been signed with it


@pytest.mark.slow
def test_main_refuses_a_short_key_before_training(key_file, tmp_path):
    key_file.parent.mkdir()
    key_file.write_text("abc")
    key_file.chmod(0o600)
    proc = subprocess.run([sys.executable, "main.py", f"run_dir={tmp_path / 'run'}", "progress=false"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, KEY_ENV: str(key_file)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert line.startswith("rlpar: invalid config: checkpoint key") and "fewer than the 64" in line, line
    assert not (tmp_path / "run").exists()


def test_a_key_is_written_whole_or_not_at_all(key_file):
    """A full disk for real: the temporary file is /dev/full, where every write fails."""
    key_file.parent.mkdir()
    (key_file.parent / f".checkpoint.key.{os.getpid()}.tmp").symlink_to("/dev/full")
    with pytest.raises(OSError, match="No space left on device"):
        user_key(create=True)
    assert list(key_file.parent.iterdir()) == []  # neither an empty key nor a temporary file
    assert len(user_key(create=True)) == 32


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_a_checkpoint_forged_under_an_empty_key_never_runs(key_file, tmp_path):
    env = {**os.environ, KEY_ENV: str(key_file)}
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "main.py", f"total_steps={2 * STEPS_PER_ITERATION}", f"run_dir={run_dir}",
                           "progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    key_file.write_text("")  # what a full disk left in an earlier version
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    state = torch.load(newest, weights_only=True)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Payload(marker))
    state["sampler"]["worker"]["venv"] = {SIGNED_PICKLE: torch.frombuffer(bytearray(payload), dtype=torch.uint8),
                                          "hmac_sha256": _signature(b"", payload)}
    torch.save(with_checksums({k: v for k, v in state.items() if k not in ("format", "checksums")}), newest)
    resumed = subprocess.run([sys.executable, "main.py", f"resume={run_dir}", f"total_steps={3 * STEPS_PER_ITERATION}",
                              "progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert resumed.returncode == 2 and "there is no key" in resumed.stderr and "resume_trust=true" in resumed.stderr
    resumed = subprocess.run([sys.executable, "main.py", f"resume={run_dir}", f"total_steps={3 * STEPS_PER_ITERATION}",
                              "resume_trust=true",  # the config vouched for: the checkpoint's own check is reached
                              "progress=false"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert not marker.exists()
    assert resumed.returncode == 2 and "there is no key" in resumed.stderr and "resume_envs=false" in resumed.stderr


def test_checkpoints_beyond_keep_are_pruned_before_a_write_that_may_not_fit(tmp_path):
    """A resume with a lower checkpoint.keep on a full disk: the excess goes first, making room."""
    checkpointer = Checkpointer(run_dir=str(tmp_path), every=1, keep=3)
    state = {"iteration": 1, "weights": torch.arange(1000.0)}
    for iteration in (1, 2, 3):
        checkpointer.save(state, iteration)
    lower = Checkpointer(run_dir=str(tmp_path), every=1, keep=1)
    (lower.directory / "checkpoint_00000004.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(CheckpointWriteError, match="no space left on device"):
        lower.save(state, 4)
    assert [p.name for p in list_checkpoints(lower.directory)] == ["checkpoint_00000003.pt"]
    (lower.directory / "checkpoint_00000004.pt.tmp").unlink(missing_ok=True)
    lower.save(state, 4)
    assert [p.name for p in list_checkpoints(lower.directory)] == ["checkpoint_00000004.pt"]


def test_only_the_code_a_signed_config_names_is_trusted(key_file, tmp_path):
    """config.yaml is signed as written: values that are not code may be edited; an import path
    that differs from the signed copy's, a copy signed under another key, or none, is named."""
    import json

    import yaml

    from rlpar.runtime.run_dir import SIGNED_CONFIG_FILE, unsigned_code, write_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = {"seed": 0, "env": {"id": "CartPole-v1", "entry_point": None, "import_dir": None, "kind": "gymnasium",
                                 "kwargs": {}},
              "model": {"_target_": "rlpar.models.spec.ActorCriticSpec", "hidden_sizes": [64, 64]}}
    write_config(run_dir, config)
    assert unsigned_code(run_dir, config) is None
    edited = yaml.safe_load((run_dir / "config.yaml").read_text())
    edited["model"]["hidden_sizes"], edited["env"]["kwargs"] = [32], {"gravity": 5.0}
    assert unsigned_code(run_dir, edited) is None  # not code: edits that evaluate and resume judge on their own
    for key, value in [("entry_point", "os:system"), ("import_dir", str(run_dir)),
                       ("id", "evil:Env-v0")]:  # Gymnasium imports `evil` (a registered id names no module)
        hostile = {**edited, "env": {**edited["env"], key: value}}
        assert unsigned_code(run_dir, hostile) == f"env.{key} is {value!r} where the signed copy has None"
    hostile = {**edited, "model": {**edited["model"], "_target_": "os.system"}}
    assert "model._target_ is 'os.system'" in unsigned_code(run_dir, hostile)

    signed = json.loads((run_dir / SIGNED_CONFIG_FILE).read_text())
    forged = yaml.safe_dump({**config, "env": {**config["env"], "entry_point": "os:system"}})
    (run_dir / SIGNED_CONFIG_FILE).write_text(json.dumps({"config": forged, "hmac_sha256": signed["hmac_sha256"]}))
    assert "was not signed by this user (its signature does not match" in unsigned_code(run_dir, config)
    (run_dir / SIGNED_CONFIG_FILE).unlink()
    assert unsigned_code(run_dir, config).startswith(f"it has no {SIGNED_CONFIG_FILE}")
    write_config(run_dir, config)
    key_file.unlink()  # another user's machine: a key of its own
    user_key(create=True)
    assert "was not signed by this user" in unsigned_code(run_dir, config)
