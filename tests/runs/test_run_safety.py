"""Reliability II: checkpoints that cannot run code or lie, one writer per run directory, metrics
that are never silently lost, a full disk, and non-finite observations. Each defect is
reproduced for real: a pickle payload written into a checkpoint, bytes flipped in one, two
`main.py` processes on one directory, a file system that really is full."""

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rlpar.errors import RunDirError
from rlpar.logging.run_log import RunLog
from rlpar.runtime.build import build_trainer
from rlpar.runtime.checkpoint import Checkpointer, list_checkpoints, load_checkpoint, untrusted_pickles, with_checksums
from rlpar.runtime.errors import CheckpointError, CheckpointWriteError
from rlpar.runtime.run import run
from rlpar.sampling.errors import NonFiniteObservationError
from tests.processes import wait_until
from tests.defaults import STEPS_PER_ITERATION

ROOT = Path(__file__).resolve().parents[2]


def main_py(*overrides, hydra_dir: Path, stderr=subprocess.PIPE, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "main.py", *overrides, "progress=false", f"hydra.run.dir={hydra_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
    )


def split_import_times(stderr: str) -> tuple[str, set[str]]:
    """stderr of a run with PYTHONPROFILEIMPORTTIME=1: (what the run itself wrote, the top-level
    packages it imported)."""
    own = [line for line in stderr.splitlines(keepends=True) if not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines() if line.startswith("import time:")}
    return "".join(own), imported


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _, stderr = proc.communicate(timeout=timeout)
    return proc.returncode, stderr


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """A finished local run with three checkpoints (iterations 4, 8, 12)."""
    run_dir = tmp_path_factory.mktemp("safety") / "run"
    code, stderr = finish(main_py(f"total_steps={12 * STEPS_PER_ITERATION}", "checkpoint.every=4", hydra_dir=run_dir))
    assert code == 0, stderr
    assert [p.name for p in list_checkpoints(run_dir / "checkpoints")] == [
        "checkpoint_00000004.pt", "checkpoint_00000008.pt", "checkpoint_00000012.pt"]
    return run_dir


@pytest.fixture
def copy_of(local_run, tmp_path):
    def _copy() -> Path:
        return Path(shutil.copytree(local_run, tmp_path / "copy"))
    return _copy


class Payload:
    """Unpickling it runs `touch <marker>`, as a hostile checkpoint would."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _inject(path: Path, marker: Path, where: str, recompute_checksums: bool) -> None:
    state = torch.load(path, weights_only=True)
    payload = torch.frombuffer(bytearray(pickle.dumps(Payload(marker))), dtype=torch.uint8)
    worker = state["sampler"]["worker"]
    if where == "signed_blob":  # where environment state is stored now
        worker["venv"]["signed_pickle"] = payload
    elif where == "unsigned_blob":  # same place, signature removed
        worker["venv"] = {"signed_pickle": payload}
    else:  # where it was stored before signing (checkpoint format 1)
        worker["venv_pickle"] = payload
    if recompute_checksums:
        state = with_checksums({k: v for k, v in state.items() if k not in ("format", "checksums")})
    torch.save(state, path)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["signed_blob", "unsigned_blob", "old_location"])
def test_a_pickle_payload_in_a_checkpoint_never_runs(copy_of, tmp_path, where):
    run_dir = copy_of()
    marker = tmp_path / "pwned"
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    # The attacker recomputes the (public) checksums, so the file verifies as undamaged.
    _inject(newest, marker, where, recompute_checksums=True)
    code, stderr = finish(main_py(f"resume={run_dir}", f"total_steps={16 * STEPS_PER_ITERATION}", hydra_dir=tmp_path / "h1"))
    assert not marker.exists()
    if where == "old_location":  # nothing reads that key any more: the run resumes, the payload stays inert
        assert code == 0, stderr
        return
    assert code == 2, stderr
    line = one_line(stderr)
    assert "not signed" in line or "signature does not match" in line, line
    assert "resume_envs=false" in line and newest.name in line, line
    # The documented way on: resume without the environments' state.
    code, stderr = finish(main_py(f"resume={run_dir}", f"total_steps={16 * STEPS_PER_ITERATION}", "resume_envs=false", hydra_dir=tmp_path / "h2"))
    assert code == 0, stderr
    assert not marker.exists()
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, 17))


@pytest.mark.slow
def test_a_payload_without_new_checksums_is_skipped_as_damaged(copy_of, tmp_path):
    run_dir = copy_of()
    marker = tmp_path / "pwned"
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    _inject(newest, marker, "signed_blob", recompute_checksums=False)
    with pytest.raises(CheckpointError, match="checksum mismatch in sampler"):
        load_checkpoint(newest)
    code, stderr = finish(main_py(f"resume={run_dir}", hydra_dir=tmp_path / "h"))
    assert code == 0, stderr
    assert not marker.exists()


@pytest.mark.slow
def test_environment_state_signed_with_another_users_key_is_refused(copy_of, tmp_path, monkeypatch):
    run_dir = copy_of()
    state = load_checkpoint(list_checkpoints(run_dir / "checkpoints")[-1])
    assert untrusted_pickles(state) == []
    monkeypatch.setenv("RLPAR_KEY_FILE", str(tmp_path / "someone_elses.key"))
    (problem,) = untrusted_pickles(state)
    assert problem.startswith("sampler.worker.venv: there is no key at")
    (tmp_path / "someone_elses.key").write_text("ab" * 32 + "\n")
    (tmp_path / "someone_elses.key").chmod(0o600)  # a key open to others is refused before it is compared
    (problem,) = untrusted_pickles(state)
    assert "signature does not match" in problem


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flipped_bytes", "truncated"])
def test_a_damaged_newest_checkpoint_is_named_set_aside_and_recorded(copy_of, tmp_path, damage):
    run_dir = copy_of()
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    data = bytearray(newest.read_bytes())
    if damage == "flipped_bytes":
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    else:
        data = data[: len(data) // 3]
    newest.write_bytes(bytes(data))
    with pytest.raises(CheckpointError):
        load_checkpoint(newest)

    code, stdout_err = _resume_output(run_dir, tmp_path)
    assert code == 0, stdout_err
    skipped = [line for line in stdout_err.splitlines() if "skipped checkpoint" in line]
    assert len(skipped) == 1 and "checkpoint_00000012.pt" in skipped[0] and "resuming from checkpoint_00000008.pt" in skipped[0]
    (event,) = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert event["event"] == "checkpoint_skipped" and event["resumed_from"] == "checkpoint_00000008.pt"
    assert (run_dir / "checkpoints" / "checkpoint_00000012.pt.skipped").exists()
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, 13))  # iterations 9-12 trained again, each once


EVIL_MODULE = """from pathlib import Path

Path({marker!r}).touch()  # importing this module is the attack
from gymnasium.envs.classic_control.cartpole import CartPoleEnv as Env
"""


def evaluate(run_dir: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlpar", "evaluate", str(run_dir), "--no-video", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("named", ["os_system", "module_in_the_run_dir"])
def test_code_a_run_directory_names_is_never_run_without_the_trust_flag(copy_of, tmp_path, named):
    """config.yaml edited to name `os:system` (a command in env.kwargs), or a module of the
    directory's own through env.import_dir: evaluate and resume refuse in one line naming the
    flag, before anything is imported."""
    run_dir = copy_of()
    marker = tmp_path / "pwned"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    if named == "os_system":
        config["env"].update(id=None, entry_point="os:system", kwargs={"command": f"touch {marker}"})
    else:
        (run_dir / "evilenv.py").write_text(EVIL_MODULE.format(marker=str(marker)))
        config["env"].update(id=None, entry_point="evilenv:Env", import_dir=str(run_dir))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    evaluated = evaluate(run_dir, cwd=tmp_path)
    assert evaluated.returncode == 2, evaluated.stderr
    line = one_line(evaluated.stderr)
    assert "did not sign" in line and "env.entry_point" in line and line.endswith(f"rlpar evaluate {run_dir} --trust")
    code, stderr = finish(main_py(f"resume={run_dir}", f"total_steps={16 * STEPS_PER_ITERATION}", hydra_dir=tmp_path / "h"))
    assert code == 2, stderr
    assert one_line(stderr).endswith(f"python main.py resume={run_dir} resume_trust=true")
    assert not marker.exists()
    if named == "module_in_the_run_dir":  # the flag is the user's own decision to run it
        trusted = evaluate(run_dir, "--trust", "--episodes", "1", cwd=tmp_path)
        assert trusted.returncode == 0 and marker.exists(), trusted.stderr


@pytest.mark.slow
def test_a_tensor_stretched_past_its_file_is_damage_found_before_it_is_allocated(copy_of, tmp_path):
    """A 160 GB view of one float (`expand`) in a checkpoint of under a MB, with a wrong checksum:
    the checkpoint is damaged before anything is made contiguous, and evaluate and resume use
    the one before it."""
    run_dir = copy_of()
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    state = torch.load(newest, weights_only=True)
    model = state["algorithm"]["model"]
    model[next(iter(model))] = torch.zeros(1).expand(200_000, 200_000)
    torch.save(state, newest)
    assert newest.stat().st_size < 1_000_000
    with pytest.raises(CheckpointError, match=r"a tensor larger than the whole .*\(200000, 200000\)"):
        load_checkpoint(newest)
    evaluated = evaluate(run_dir, "--episodes", "1", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "skipped checkpoint checkpoint_00000012.pt" in evaluated.stdout, evaluated.stdout
    assert "checkpoint_00000008.pt, iteration 8" in evaluated.stdout
    code, output = _resume_output(run_dir, tmp_path)
    assert code == 0 and "resuming from checkpoint_00000008.pt" in output, output


def _resume_output(run_dir: Path, tmp_path: Path) -> tuple[int, str]:
    proc = main_py(f"resume={run_dir}", hydra_dir=tmp_path / "h", stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out


@pytest.mark.slow
def test_a_second_run_on_one_run_dir_is_refused_at_once_even_with_the_lock_file_deleted(tmp_path):
    run_dir = tmp_path / "shared"
    first = main_py("total_steps=200000", "checkpoint.every=5", "checkpoint.keep=2", hydra_dir=run_dir)
    try:
        wait_until(lambda: (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").stat().st_size > 0,
                   first, 60, "a first metrics row")
        config_before = (run_dir / "config.yaml").read_bytes()
        for lock_file in ("kept", "deleted"):  # deleted as a user would, taking it for a stale lock
            if lock_file == "deleted":
                (run_dir / ".rlpar.lock").unlink()
            for args in (["env=acrobot", "seed=2"], [f"resume={run_dir}"]):  # another run, and a resume of this one
                second = main_py(*args, hydra_dir=run_dir if not args[0].startswith("resume") else tmp_path / "h",
                                 env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
                code, stderr = finish(second, timeout=300)
                stderr, imported = split_import_times(stderr)
                assert code == 2
                assert {"omegaconf", "rlpar"} <= imported and not imported & {"torch", "ray"}  # at once: before the slow part
                line = one_line(stderr)
                holder = f"process {first.pid}" if lock_file == "kept" else "another process"
                assert f"is in use by {holder}" in line, line
        assert first.poll() is None, "the first run was disturbed"
        code, stderr = finish(first)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert code == 0, stderr
    assert (run_dir / "config.yaml").read_bytes() == config_before
    iterations = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert iterations == list(range(1, len(iterations) + 1)) and len(iterations) == 200000 // STEPS_PER_ITERATION + 1


def test_the_lock_is_held_for_the_run_and_released_after_it(make_cfg, tmp_path):
    from rlpar.runtime import run_lock

    run_lock.acquire(tmp_path / "r", new_run=True)
    with pytest.raises(run_lock.RunDirInUseError, match="another run of this process"):
        run_lock.acquire(tmp_path / "r", new_run=True)
    run_lock.release(tmp_path / "r")
    assert run(make_cfg("total_steps=256", run_dir=tmp_path / "r"))["iteration"] == 1
    assert not run_lock.holds(tmp_path / "r")  # released at the end: the directory can be resumed
    assert not (tmp_path / "r" / run_lock.HOLDER_FILE).exists()  # no lock file is left to look stale
    run_lock.acquire(tmp_path / "r", new_run=False)
    run_lock.release(tmp_path / "r")


@pytest.mark.parametrize("how", ["deleted", "replaced", "overwritten in place", "appended to"])
def test_metrics_file_deleted_replaced_or_overwritten_during_a_run_is_restored(make_cfg, tmp_path, how):
    trainer = build_trainer(make_cfg("total_steps=100000", "checkpoint.every=0", run_dir=tmp_path / "m"))
    try:
        for _ in range(3):
            trainer.train()
        metrics = tmp_path / "m" / "metrics.jsonl"
        if how in ("deleted", "replaced"):
            metrics.unlink()
        if how != "deleted":
            with open(metrics, "a" if how == "appended to" else "w") as handle:  # `echo x > metrics.jsonl`: same file
                handle.write("not metrics\n")
        trainer.train()
    finally:
        trainer.close()
    assert [json.loads(line)["iteration"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4]
    (event,) = [json.loads(line) for line in (tmp_path / "m" / "events.jsonl").read_text().splitlines()]
    was = "written to in place" if how in ("overwritten in place", "appended to") else how
    assert event["event"] == "metrics_file_recreated" and event["was"] == was and event["rows"] == 3
    aside = [p.read_text() for p in (tmp_path / "m").glob("metrics.jsonl.replaced-*")]
    if how == "deleted":
        assert aside == []
    else:
        (found,) = aside
        assert found.endswith("not metrics\n") and found.count("\n") == (4 if how == "appended to" else 1)


def test_a_failed_checkpoint_write_leaves_no_temporary_file_and_keeps_the_others(tmp_path):
    """ENOSPC for real: the temporary file is /dev/full, where every write fails with it."""
    checkpointer = Checkpointer(run_dir=str(tmp_path), every=1, keep=3)
    state = {"iteration": 1, "weights": torch.arange(1000.0)}
    checkpointer.save(state, 1)
    (checkpointer.directory / "checkpoint_00000002.pt.tmp").symlink_to("/dev/full")
    with pytest.raises(CheckpointWriteError, match="no space left on device.*earlier checkpoints are kept: checkpoint_00000001.pt"):
        checkpointer.save(state, 2)
    assert sorted(p.name for p in checkpointer.directory.iterdir()) == ["checkpoint_00000001.pt"]
    assert torch.equal(load_checkpoint(checkpointer.directory / "checkpoint_00000001.pt")["weights"], state["weights"])


def test_a_full_disk_under_the_run_log_costs_the_traceback_not_the_one_line(tmp_path, capfd):
    """main.log on /dev/full: records are dropped without a console traceback per record, the
    failure's note says the traceback could not be kept, and closing the log raises nothing."""
    (tmp_path / "main.log").symlink_to("/dev/full")
    with RunLog(tmp_path) as run_log:
        logging.getLogger("rlpar").warning("a worker died")
        logging.getLogger("rlpar").warning("and another")
        note = run_log.traceback_note(ValueError("boom"))
    assert note == "no traceback kept: main.log cannot be written (No space left on device)"
    assert "Logging error" not in capfd.readouterr().err


def _unshare_works() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _unshare_works(), reason="needs user and mount namespaces (unshare -rm) for a small tmpfs")
def test_a_full_disk_stops_the_run_with_one_line_and_keeps_earlier_checkpoints(tmp_path):
    """A real 400 KiB tmpfs, in a private mount namespace: the run fills it, then resumes on it."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    run_dir = mount_point / "run"
    script = (
        f"mount -t tmpfs -o size=400k tmpfs {mount_point} && "
        f"{sys.executable} main.py total_steps=1000000 checkpoint.every=2 checkpoint.keep=1000 progress=false "
        f"logger.tensorboard=false run_dir={run_dir} hydra.run.dir={tmp_path / 'h'}; echo exit=$?; "
        f"ls {run_dir}/checkpoints; "
        f"{sys.executable} main.py resume={run_dir} progress=false hydra.run.dir={tmp_path / 'h2'}; echo exit=$?"
    )
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    first, listing, second = proc.stdout.split("exit=")[0], proc.stdout.split("exit=")[1], proc.stdout.split("exit=")[2]
    assert listing.startswith("3"), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    stop_lines = [line for line in proc.stderr.splitlines() if line.startswith("rlpar:")]
    assert len(stop_lines) == 2, proc.stderr
    assert stop_lines[0].startswith("rlpar: training stopped:") and "no space left on device" in stop_lines[0].lower()
    kept = [name for name in listing.split()[1:] if name.startswith("checkpoint_")]
    assert kept and all(name.endswith(".pt") for name in kept), listing  # no temporary file left
    assert "no space left on device" in stop_lines[1].lower(), proc.stderr
    assert second.startswith("3") or second.startswith("2"), proc.stdout


@pytest.mark.slow
def test_nan_observations_stop_the_run_naming_observations(make_cfg, tmp_path):
    cfg = make_cfg("env.id=null", "env.entry_point=tests.faulty_envs:NaNAfterCartPole", "+env.kwargs.nan_after=300",
                   "total_steps=100000", "checkpoint.every=0", run_dir=tmp_path / "nan")
    with pytest.raises(NonFiniteObservationError, match=r"NaN or infinite observations \(environment\(s\) 0, 1,"):
        run(cfg)
    assert list_checkpoints(tmp_path / "nan" / "checkpoints"), "no checkpoint written at the stop"


FULL_TENSORBOARD = """
import sys, time
from pathlib import Path
from rlpar.config.compose import compose_config
from rlpar.runtime.build import build_trainer
from rlpar.errors import RunDirError
run_dir = Path(sys.argv[1])
trainer = build_trainer(compose_config(["progress=false", "total_steps=1000000", "checkpoint.every=0"], run_dir=run_dir))
trainer.train()
trainer.logger._tb.flush()
(events,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")
events.unlink()
events.symlink_to("/dev/full")
try:
    while True:  # until the writer's next flush (every 5 s) has failed; the test's timeout bounds a hang
        trainer.train()
        time.sleep(0.05)
except RunDirError as err:
    print(f"stopped: {err}")
finally:
    trainer.close()
"""


@pytest.mark.slow
def test_a_full_disk_under_tensorboard_stops_the_run_in_one_line(tmp_path):
    """TensorBoard's events file on /dev/full: the iteration whose events are flushed there stops
    the run with one line, no traceback (in a process of its own, as a user's run)."""
    proc = subprocess.run([sys.executable, "-c", FULL_TENSORBOARD, str(tmp_path / "tb")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("stopped: cannot write TensorBoard events in") and "No space left" in proc.stdout
    assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr, proc.stderr
