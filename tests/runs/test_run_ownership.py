"""A run directory belongs to one run (issue 24): a new run never writes into another run's
directory or a user's folder, a directory moved under a live run stops it, and a hand-edited
config.yaml is refused, naming what changed. (A second run on a live run's directory, its lock
file deleted: test_run_safety.py.)"""

import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlpar.runtime import run_lock
from rlpar.runtime.build import build_trainer
from rlpar.errors import RunDirError
from tests.defaults import STEPS_PER_ITERATION
from tests.processes import wait_until

ROOT = Path(__file__).resolve().parents[2]


def main_py(*overrides, cwd=ROOT) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "main.py"), *overrides, "progress=false"], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    stdout, stderr = proc.communicate(timeout=timeout)
    return proc.returncode, stdout, stderr


def refusal(proc: subprocess.Popen) -> str:
    """The one line of a run refused with exit 2, nothing on stdout."""
    code, stdout, stderr = finish(proc)
    assert code == 2, (code, stdout, stderr)
    lines = [line for line in (stdout + stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stdout + stderr
    return lines[0]


def fingerprint(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def iterations(run_dir: Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("owned") / "run"
    code, _, stderr = finish(main_py(f"total_steps={6 * STEPS_PER_ITERATION}", "checkpoint.every=2", f"run_dir={run_dir}"))
    assert code == 0, stderr
    return run_dir


@pytest.mark.slow
def test_a_new_run_into_a_finished_runs_directory_is_refused_and_leaves_it_intact(finished_run, tmp_path):
    run_dir = Path(shutil.copytree(finished_run, tmp_path / "run"))
    before = fingerprint(run_dir)
    assert "config.yaml" in before and "metrics.jsonl" in before and any(k.startswith("checkpoints/") for k in before)
    assert run_lock.HOLDER_FILE not in before  # a finished run leaves no lock file to look stale
    line = refusal(main_py("total_steps=10000", "seed=7", "env=pendulum", f"run_dir={run_dir}", cwd=tmp_path))
    assert "already holds a run" in line and f"resume={run_dir}" in line and "new run_dir" in line, line
    assert fingerprint(run_dir) == before
    assert not (tmp_path / "outputs").exists()  # nor is an empty folder of Hydra's left behind

    evaluated = subprocess.run([sys.executable, "-m", "rlpar", "evaluate", str(run_dir), "--no-video", "--episodes", "1"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 0 and evaluated.stdout.startswith("returns:"), evaluated.stderr
    code, _, stderr = finish(main_py(f"resume={run_dir}", f"total_steps={8 * STEPS_PER_ITERATION}"))
    assert code == 0, stderr
    assert iterations(run_dir) == list(range(1, 9))


@pytest.mark.slow
def test_a_folder_of_a_users_files_is_never_written_into(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("my: own config\n")
    (data / "table.csv").write_text("a,b\n1,2\n")
    before = fingerprint(data)
    line = refusal(main_py(f"run_dir={data}"))
    assert "holds files rlpar did not write" in line and "config.yaml" in line and "table.csv" in line, line
    assert fingerprint(data) == before and sorted(p.name for p in data.iterdir()) == ["config.yaml", "table.csv"]
    line = refusal(main_py("hydra.run.dir=/", cwd=tmp_path))  # Hydra's own folder setting, the file system's root
    assert line.startswith("rlpar: run directory / holds files rlpar did not write"), line
    assert not Path("/config.yaml").exists() and not Path("/metrics.jsonl").exists()


def test_a_run_directory_moved_during_the_run_stops_it_before_it_writes_elsewhere(make_cfg, tmp_path):
    run_dir = tmp_path / "moved"
    trainer = build_trainer(make_cfg("total_steps=100000", "checkpoint.every=0", run_dir=run_dir))
    try:
        assert run_lock.holds(run_dir)  # build_trainer took it
        trainer.check_run_dir = lambda: run_lock.check_owner(run_dir)
        trainer.train()
        run_dir.rename(tmp_path / "elsewhere")
        run_dir.mkdir()  # another run could now take this path
        with pytest.raises(RunDirError, match="was moved, replaced or removed during the run"):
            trainer.train()
    finally:
        trainer.close()
    assert not run_lock.holds(run_dir)
    assert list(run_dir.iterdir()) == []  # nothing was written into the new directory
    assert iterations(tmp_path / "elsewhere") == [1]


def _hold_forever(queue):
    queue.put(os.getpid())
    signal.pause()


def test_a_forked_worker_does_not_keep_the_lock_after_its_run_released_it(tmp_path):
    run_lock.acquire(tmp_path / "r", new_run=True)
    queue = mp.get_context("fork").Queue()
    child = mp.get_context("fork").Process(target=_hold_forever, args=(queue,), daemon=True)
    child.start()
    try:
        queue.get(timeout=30)
        run_lock.release(tmp_path / "r")
        assert child.is_alive()
        probe = subprocess.run(  # another process takes the directory while the forked child still lives
            [sys.executable, "-c", "import sys; from rlpar.runtime import run_lock; "
                                   "run_lock.acquire(sys.argv[1], new_run=False); print('taken')", str(tmp_path / "r")],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == "taken", probe.stderr
    finally:
        child.kill()
        child.join(10)


@pytest.mark.slow
def test_a_hand_edited_config_is_refused_naming_what_no_longer_matches(finished_run, tmp_path):
    run_dir = Path(shutil.copytree(finished_run, tmp_path / "edited"))
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["workers"] = 2
    config["model"]["hidden_sizes"] = [32, 32]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    line = refusal(main_py(f"resume={run_dir}", f"total_steps={8 * STEPS_PER_ITERATION}"))
    assert "no longer matches checkpoint_00000006.pt" in line, line
    assert "model.hidden_sizes (checkpoint [64, 64], config.yaml [32, 32])" in line and "workers (checkpoint 1, config.yaml 2)" in line
    evaluated = subprocess.run([sys.executable, "-m", "rlpar", "evaluate", str(run_dir), "--no-video"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 2 and "model.hidden_sizes" in evaluated.stderr and "Traceback" not in evaluated.stderr

    config["workers"], config["model"]["hidden_sizes"] = 1, [64, 64]
    config["env"]["id"] = "Pendulum-v1"  # evaluating on another environment is fine, if the network fits it
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    evaluated = subprocess.run([sys.executable, "-m", "rlpar", "evaluate", str(run_dir), "--no-video"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 2 and "Traceback" not in evaluated.stderr, evaluated.stderr
    assert "network does not fit Pendulum-v1's spaces" in evaluated.stderr and "env.id" in evaluated.stderr


@pytest.mark.slow
def test_a_killed_run_leaves_no_empty_folder_of_hydras(tmp_path):
    run_dir = tmp_path / "elsewhere"
    proc = main_py("total_steps=10000000", f"run_dir={run_dir}", cwd=tmp_path)
    try:
        wait_until(lambda: (run_dir / "metrics.jsonl").exists(), proc, 60, "a metrics file")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (tmp_path / "outputs").exists()  # Hydra's folder was removed as the run began
    assert (run_dir / "config.yaml").exists()
