"""SIGINT and SIGTERM stop a run in the iteration under way, with a final checkpoint and no worker left."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import (cmdline, default_sigint, descendants_of, left_running, rows_while_stopped, running,
                             still_running, wait_until)

pytestmark = pytest.mark.slow  # each test starts processes; those that start Ray are marked ray

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_with_final_checkpoint_and_no_workers_left(tmp_path, sig):
    proc = subprocess.Popen(
        [sys.executable, "main.py", "parallel=multiprocess", "workers=2", "total_steps=100000000",
         "checkpoint.every=0", "progress=false", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )
    metrics = tmp_path / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 3, proc, 300, "3 iterations")
    workers = {pid for pid, _ in descendants_of(proc.pid)}
    assert len(workers) >= 2
    logged = rows_while_stopped(proc, metrics, lambda: proc.send_signal(sig))
    proc.wait(timeout=300)
    assert proc.returncode == 130
    assert "Traceback" not in proc.stderr.read()
    last = json.loads(metrics.read_text().splitlines()[-1])["iteration"]
    assert last <= logged + 1  # stopped after the iteration under way
    checkpoints = sorted((tmp_path / "checkpoints").glob("checkpoint_*.pt"))
    assert checkpoints and checkpoints[-1].name == f"checkpoint_{last:08d}.pt"
    alive = lambda: {pid: cmdline(pid) for pid in workers if running(pid)}
    deadline = time.monotonic() + 60
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive()


# -- parallel=distributed: the private Ray instance main.py starts goes away with the run ----------
def _distributed_run(tmp_path: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen(
        [sys.executable, "main.py", "parallel=distributed", "workers=2", "total_steps=100000000",
         "checkpoint.every=0", "progress=false", f"hydra.run.dir={tmp_path}", *overrides],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A background job of a non-interactive shell ignores SIGINT, and main.py keeps it so.
        preexec_fn=default_sigint,
    )


def _interrupt_and_check_nothing_is_left(proc, family: dict, adopted, metrics: Path, sig=signal.SIGINT) -> str:
    logged = rows_while_stopped(proc, metrics, lambda: proc.send_signal(sig))
    proc.wait(timeout=300)
    assert proc.returncode == 130
    assert _rows(metrics) <= logged + 1  # stopped after the iteration under way

    # The run's processes seen before the signal, and any of its descendants since orphaned; the
    # driver's ray.shutdown() has returned: allow stragglers.
    left = left_running(family, adopted, 60)
    assert not left, f"processes left behind: {left}"
    return proc.stderr.read()


def _rows(metrics: Path) -> int:
    return metrics.read_text().count("\n") if metrics.exists() else 0


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.ray
def test_signal_stops_a_distributed_run_with_final_checkpoint_and_no_ray_process_left(tmp_path, adopted_orphans, sig):
    """(SIGTERM: ray.init had replaced main.py's handler with its own, which exited at once with
    code 15, no checkpoint and a stack dump.)"""
    proc = _distributed_run(tmp_path)
    try:
        metrics = tmp_path / "metrics.jsonl"
        wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 3, proc, 180, "3 iterations")
        family = descendants_of(proc.pid)
        commands = list(family.values())
        assert any("raylet" in c for c in commands) and any("gcs_server" in c for c in commands), commands
        assert sum(c.startswith("ray::EnvRunner") for c in commands) == 2, commands

        stderr = _interrupt_and_check_nothing_is_left(proc, family, adopted_orphans, metrics, sig)
        assert "Traceback" not in stderr and "SIGTERM received" not in stderr
        last = json.loads(metrics.read_text().splitlines()[-1])["iteration"]
        checkpoints = sorted((tmp_path / "checkpoints").glob("checkpoint_*.pt"))
        assert checkpoints and checkpoints[-1].name == f"checkpoint_{last:08d}.pt"
    finally:
        _stop(proc)


@pytest.mark.ray
def test_sigint_while_ray_starts_leaves_no_ray_process(tmp_path, adopted_orphans):
    """Ctrl-C inside ray.init: Ray's agents used to outlive the run (nothing knew of them yet)."""
    proc = _distributed_run(tmp_path)
    try:
        family = {}

        def agents_up() -> bool:  # started by the raylet, before ray.init has seen it register
            family.update(descendants_of(proc.pid))
            return sum(c.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")) for c in family.values()) == 2

        wait_until(agents_up, proc, 180, "Ray's agents")
        assert not (tmp_path / "metrics.jsonl").exists()
        stderr = _interrupt_and_check_nothing_is_left(proc, family, adopted_orphans, tmp_path / "metrics.jsonl")
        assert "Traceback" not in stderr
        assert not list(tmp_path.glob("checkpoints/*.pt"))  # nothing trained, nothing to keep
    finally:
        _stop(proc)


@pytest.mark.ray
def test_sigint_while_many_env_runners_boot_stops_within_seconds(tmp_path, adopted_orphans):
    """Ray starts workers two at a time here: 48 runners take about half a minute to boot, and the
    first iteration used to wait for all of them before the stop (200: minutes)."""
    proc = _distributed_run(tmp_path, "workers=48", "envs_per_worker=1", "ray.cpus_per_worker=0.04")
    try:
        family = {}

        def some_runners_up() -> bool:
            family.update(descendants_of(proc.pid))
            return sum(c.startswith("ray::EnvRunner") for c in family.values()) >= 4

        wait_until(some_runners_up, proc, 180, "4 env runners")
        metrics = tmp_path / "metrics.jsonl"
        assert not metrics.exists() or not metrics.read_text()  # still booting
        stderr = _interrupt_and_check_nothing_is_left(proc, family, adopted_orphans, metrics)
        assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "rlpar: interrupted", stderr
        assert not list(tmp_path.glob("checkpoints/*.pt"))  # nothing trained, nothing to keep
    finally:
        _stop(proc)


# -- any number of signals at any moment: exit 130 with one line, nothing of Ray's left ----------
def _moment_reached(moment: str, proc, tmp_path: Path, started: float, family: dict) -> bool:
    family.update(descendants_of(proc.pid))
    if moment == "start-up":  # Python, Hydra and rlpar importing; nothing started yet
        return time.monotonic() - started > 0.3
    if moment == "ray-boot":  # Ray's node processes are up, ray.init has not returned
        return any("gcs_server" in command for command in family.values())
    metrics = tmp_path / "metrics.jsonl"
    return metrics.exists() and metrics.read_text().count("\n") >= 2


@pytest.mark.parametrize(
    ("moment", "spacing_s", "sig"),
    [
        ("start-up", 0.05, signal.SIGINT),
        ("ray-boot", 0.25, signal.SIGINT),
        ("training", 0.05, signal.SIGINT),
        ("training", 0.25, signal.SIGINT),  # the second lands in the final checkpoint or Ray's shutdown
        ("training", 0.5, signal.SIGINT),
        ("training", 0.25, signal.SIGTERM),
    ],
    ids=lambda value: value.name if isinstance(value, signal.Signals) else str(value),
)
@pytest.mark.ray
def test_two_signals_at_any_moment_exit_130_and_leave_no_ray_process(tmp_path, adopted_orphans, moment, spacing_s, sig):
    """A second Ctrl-C 0.2-0.3 s after the first used to cut Ray's shutdown short: exit 1, no
    message, Ray's agents left running. (benchmarks/interrupts.py runs ten of these.)"""
    started = time.monotonic()
    proc = _distributed_run(tmp_path)
    try:
        family: dict = {}
        wait_until(lambda: _moment_reached(moment, proc, tmp_path, started, family), proc, 180, moment)
        logged = rows_while_stopped(proc, tmp_path / "metrics.jsonl", lambda: proc.send_signal(sig))
        time.sleep(spacing_s)
        family.update(descendants_of(proc.pid))
        proc.send_signal(sig)
        proc.wait(timeout=300)
        assert proc.returncode == 130
        assert _rows(tmp_path / "metrics.jsonl") <= logged + 1  # stopped in the iteration under way
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr, stderr
        assert stderr.strip().splitlines()[-1].startswith("rlpar: interrupted"), stderr

        left = left_running(family, adopted_orphans, 60)
        assert not left, f"processes left behind: {left}"
    finally:
        _stop(proc)


@pytest.mark.ray
def test_stopping_a_private_instance_sweeps_only_its_own_processes():
    """The sweep after ray.shutdown() takes the instance's processes, never the caller's other
    children (here: this test process's own, as a notebook's or a test's would be)."""
    from rlpar.cluster.connection import RayConnection

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    before = descendants_of(os.getpid())  # the bystander, and e.g. multiprocessing's resource tracker
    connection = RayConnection(address=None, num_cpus=1, object_store_mb=100)
    try:
        import ray

        assert os.environ["RAY_AUTH_MODE"] == "token"  # every instance rlpar starts requires the token
        ray_family = {key: command for key, command in descendants_of(os.getpid()).items() if key not in before}
        assert any("raylet" in command for command in ray_family.values())
        assert ray.get(ray.remote(lambda: 1).remote()) == 1
    finally:
        connection.shutdown()
    try:
        assert not still_running(ray_family), still_running(ray_family)
        assert running(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()
